"""The implementation of the ``monarch`` package. Programs import the public
modules (``monarch.actor``, ``monarch.rdma``, ``monarch.job``); the modules
under ``monarch._src`` may change shape at any time."""

"""Registered buffers (``rdma``) and the data plane under large message
payloads (``payload``); ``monarch.rdma`` re-exports the public names."""

// libmyactors.so: the example's actors as a plugin for `monarch worker
// --plugin`, so any controller (C++, Python, ...) can spawn "Trainer" on
// generic workers. Links Monarch::plugin (headers only), not libmonarch.
#include <monarch/plugin.hpp>

#include "trainer.hpp"

MONARCH_ACTOR(sgd::Trainer, "Trainer");
MONARCH_PLUGIN();

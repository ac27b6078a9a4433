// A plugin library for `monarch worker --plugin`: the test actor classes,
// registered under plugin-specific names. Links no libmonarch.
#include <monarch/plugin.hpp>

#include "test_actors.hpp"

MONARCH_ACTOR(test_actors::Counter, "PluginCounter");
MONARCH_ACTOR(test_actors::Echo, "PluginEcho");
MONARCH_PLUGIN();

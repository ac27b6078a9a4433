# find_package(Monarch) config. Imported targets:
#   Monarch::monarch         links libmonarch.so; include paths of monarch.h,
#                            the C++ headers (monarch/monarch.hpp) and the
#                            flatbuffers headers they use
#                            (monarch/third_party/flatbuffers); C++17
#   Monarch::monarch_static  the same with libmonarch.a
#   Monarch::plugin          headers only, for plugin libraries loaded by
#                            `monarch worker --plugin` (they must not link
#                            libmonarch: the worker owns the runtime)
#   Monarch::cli             the `monarch` executable
# Variables: Monarch_EXECUTABLE (path of `monarch`), Monarch_INCLUDE_DIR.
# Relocatable: paths are relative to this file (<prefix>/lib/cmake/Monarch).
get_filename_component(_monarch_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

set(Monarch_INCLUDE_DIR "${_monarch_prefix}/include")
set(Monarch_EXECUTABLE "${_monarch_prefix}/bin/monarch")

if(NOT TARGET Monarch::plugin)
  add_library(Monarch::plugin INTERFACE IMPORTED)
  set_target_properties(Monarch::plugin PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Monarch_INCLUDE_DIR};${Monarch_INCLUDE_DIR}/monarch/third_party"
    INTERFACE_COMPILE_FEATURES cxx_std_17)

  add_library(Monarch::monarch SHARED IMPORTED)
  set_target_properties(Monarch::monarch PROPERTIES
    IMPORTED_LOCATION "${_monarch_prefix}/lib/libmonarch.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_LINK_LIBRARIES Monarch::plugin)

  add_library(Monarch::monarch_static STATIC IMPORTED)
  set_target_properties(Monarch::monarch_static PROPERTIES
    IMPORTED_LOCATION "${_monarch_prefix}/lib/libmonarch.a"
    INTERFACE_LINK_LIBRARIES "Monarch::plugin;pthread;dl;m")

  add_executable(Monarch::cli IMPORTED)
  set_target_properties(Monarch::cli PROPERTIES IMPORTED_LOCATION "${Monarch_EXECUTABLE}")
endif()

unset(_monarch_prefix)
set(Monarch_FOUND TRUE)

/*
 * A C program built against an installed libmonarch with pkg-config
 * (scripts/test-install.sh, part of `make test`):
 *
 *   cc hello.c $(pkg-config --cflags --libs monarch) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir monarch)
 *
 * Checks that the header and the library agree on the ABI version, creates
 * and frees a runtime, and prints the header's version.
 */
#include <monarch.h>
#include <stdio.h>

int main(void) {
    if (monarch_abi_version() != MONARCH_ABI_VERSION) {
        fprintf(stderr, "library ABI %u, header ABI %u\n", monarch_abi_version(), MONARCH_ABI_VERSION);
        return 1;
    }
    monarch_runtime *rt = NULL;
    if (monarch_runtime_new(&rt) != MONARCH_OK) {
        fprintf(stderr, "monarch_runtime_new: %s\n", monarch_last_error());
        return 1;
    }
    if (monarch_runtime_free(rt) != MONARCH_OK) {
        fprintf(stderr, "monarch_runtime_free: %s\n", monarch_last_error());
        return 1;
    }
    printf("libmonarch %d.%d.%d\n", MONARCH_VERSION_MAJOR, MONARCH_VERSION_MINOR, MONARCH_VERSION_PATCH);
    return 0;
}

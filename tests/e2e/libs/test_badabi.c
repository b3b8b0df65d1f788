/* libtest_badabi.so: claims an ABI version this worker does not support. */
#include <stddef.h>
#include <stdint.h>

__attribute__((visibility("default"))) uint32_t traintl_abi_version(void) { return 999; }

__attribute__((visibility("default"))) int traintl_entry_train_loop(const void* api, char* err,
                                                                    size_t err_len) {
  return 0;
}

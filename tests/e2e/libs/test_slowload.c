/* libtest_slowload.so: a library whose loading never ends (its constructor sleeps), as on a
 * hung file system: the worker's load deadline must fail the attempt. */
#include <unistd.h>

__attribute__((constructor)) static void never_done(void) {
  for (;;) sleep(60);
}

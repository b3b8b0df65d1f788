/* libtest_noentry.so: an ordinary shared library, not built with the traintl SDK. */
__attribute__((visibility("default"))) int not_a_training_function(int x) { return x + 1; }

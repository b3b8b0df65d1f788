// Thread-safety annotations: Clang's thread-safety-analysis attributes (the same set as
// Abseil's absl/base/thread_annotations.h and LevelDB's port/thread_annotations.h), with a
// TRAINTL_ prefix so they cannot clash with another library's macros. They say in the
// header which mutex guards a member (TRAINTL_GUARDED_BY(mu_)) and which lock a method
// expects its caller to hold (TRAINTL_REQUIRES(mu_)) or not to hold (TRAINTL_EXCLUDES).
//
// Under Clang they expand to __attribute__((...)) and `-Wthread-safety` checks them; under
// any other compiler (GCC builds this project) they expand to nothing. Clang checks only
// locks whose type is an annotated capability: libstdc++'s std::mutex is not, so with it
// the annotations are documentation that the compiler does not verify.
//
// Thread-safety: macros only; nothing at run time.
#pragma once

#if defined(__clang__)
#define TRAINTL_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define TRAINTL_THREAD_ANNOTATION_(x)
#endif

// The member is read and written only while holding `x`.
#define TRAINTL_GUARDED_BY(x) TRAINTL_THREAD_ANNOTATION_(guarded_by(x))
// The data the pointer member points at is accessed only while holding `x`.
#define TRAINTL_PT_GUARDED_BY(x) TRAINTL_THREAD_ANNOTATION_(pt_guarded_by(x))

// Lock ordering: this mutex is acquired after / before the listed ones.
#define TRAINTL_ACQUIRED_AFTER(...) TRAINTL_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define TRAINTL_ACQUIRED_BEFORE(...) TRAINTL_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))

// The caller must hold the listed locks (exclusively / shared) when calling the function.
#define TRAINTL_REQUIRES(...) TRAINTL_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define TRAINTL_REQUIRES_SHARED(...) \
  TRAINTL_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))

// The caller must not hold the listed locks (the function acquires them itself).
#define TRAINTL_EXCLUDES(...) TRAINTL_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define TRAINTL_LOCKS_EXCLUDED(...) TRAINTL_EXCLUDES(__VA_ARGS__)

// The function acquires / releases the listed locks (or its object's, when none are named).
#define TRAINTL_ACQUIRE(...) TRAINTL_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define TRAINTL_RELEASE(...) TRAINTL_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRAINTL_TRY_ACQUIRE(...) TRAINTL_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))

// The function returns a reference to the given lock.
#define TRAINTL_RETURN_CAPABILITY(x) TRAINTL_THREAD_ANNOTATION_(lock_returned(x))
// Asserts at run time that the calling thread holds the lock.
#define TRAINTL_ASSERT_CAPABILITY(x) TRAINTL_THREAD_ANNOTATION_(assert_capability(x))

// Marks a type as a lock (capability) and an RAII type as a scoped lock holder.
#define TRAINTL_CAPABILITY(x) TRAINTL_THREAD_ANNOTATION_(capability(x))
#define TRAINTL_SCOPED_CAPABILITY TRAINTL_THREAD_ANNOTATION_(scoped_lockable)

// Turns the analysis off for one function (code that is correct but too subtle for it).
#define TRAINTL_NO_THREAD_SAFETY_ANALYSIS TRAINTL_THREAD_ANNOTATION_(no_thread_safety_analysis)

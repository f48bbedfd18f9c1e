// A fixed CPU target for the tuner tests, so that the search space (vector width, register
// file, cores) does not depend on the host: an AVX2 machine with two cores.
#ifndef LATHE_TESTS_TUNER_TEST_TARGETS_H_
#define LATHE_TESTS_TUNER_TEST_TARGETS_H_

#include "tuner/space.h"

namespace lathe::tuner {

inline CpuTarget Avx2TwoCores() {
  CpuTarget t;
  t.vector_lanes = 8;
  t.cores = 2;
  t.vector_registers = 16;
  return t;
}

// An AVX-512 machine with two cores: 16 lanes, 32 vector registers.
inline CpuTarget Avx512TwoCores() {
  CpuTarget t;
  t.vector_lanes = 16;
  t.cores = 2;
  t.vector_registers = 32;
  return t;
}

}  // namespace lathe::tuner

#endif  // LATHE_TESTS_TUNER_TEST_TARGETS_H_

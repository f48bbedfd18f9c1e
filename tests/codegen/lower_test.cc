// Lowering as text in, text out: every schedule primitive's lowered program against a golden
// string, every primitive's trace round trip (serialize, replay, same program), the error
// cases of invalid traces and schedules, and the C ABI of built kernels.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "ir/printer.h"
#include "ir/trace.h"
#include "proto/trace_io.h"
#include "test_util.h"

namespace lathe {
namespace {

using testing::W;

std::string Lowered(const ir::Schedule& sch) {
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  EXPECT_TRUE(f.ok()) << f.status() << "\n" << ir::TraceToText(sch.trace());
  return f.ok() ? ir::ToText(*f) : "";
}

void ExpectText(const std::string& text, const std::string& golden) {
  EXPECT_EQ(text, golden) << "actual:\nR\"(" << text << ")\"";
}

// Checks the lowered text against `golden`, the trace's JSON round trip and its replay (the
// same program), and that the program agrees with the reference.
void ExpectLowered(const ir::Schedule& sch, const std::string& golden) {
  std::string text = Lowered(sch);
  ExpectText(text, golden);
  std::string json = traceio::TraceToJson(sch.trace());
  auto back = traceio::TraceFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(*back, sch.trace());
  auto replay = ir::ApplyTrace(sch.workload(), *back);
  ASSERT_TRUE(replay.ok()) << replay.status() << "\n" << json;
  EXPECT_EQ(Lowered(*replay), text) << json;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch) << "\n" << text;
}

// ---- every primitive, as golden text ----

TEST(LowerTest, Untouched) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2"));
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  for C.i in 0..4 {
    for C.j in 0..3 {
      C[C.i*3 + C.j] = 0f
      for C.k in 0..2 {
        C[C.i*3 + C.j] = C[C.i*3 + C.j] + (A[C.i*2 + C.k]*B[C.k*3 + C.j])
      }
    }
  }
}
)");
}

TEST(LowerTest, SplitDividing) {
  ir::Schedule sch(W("matmul:m=8,n=3,k=2"));
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  ExpectLowered(sch, R"(func f(A[8, 2], B[2, 3], C[8, 3]) {
  for C.i.0 in 0..2 {
    for C.i.1 in 0..4 {
      for C.j in 0..3 {
        C[C.i.0*12 + (C.i.1*3) + C.j] = 0f
        for C.k in 0..2 {
          C[C.i.0*12 + (C.i.1*3) + C.j] = C[C.i.0*12 + (C.i.1*3) + C.j] + (A[C.i.0*8 + (C.i.1*2) + C.k]*B[C.k*3 + C.j])
        }
      }
    }
  }
}
)");
}

TEST(LowerTest, SplitNonDividingAddsGuard) {
  ir::Schedule sch(W("matmul:m=10,n=3,k=2"));
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  ExpectLowered(sch, R"(func f(A[10, 2], B[2, 3], C[10, 3]) {
  for C.i.0 in 0..3 {
    for C.i.1 in 0..4 {
      for C.j in 0..3 {
        if (C.i.0*4 + C.i.1) < 10 {
          C[C.i.0*12 + (C.i.1*3) + C.j] = 0f
        }
        for C.k in 0..2 {
          if (C.i.0*4 + C.i.1) < 10 {
            C[C.i.0*12 + (C.i.1*3) + C.j] = C[C.i.0*12 + (C.i.1*3) + C.j] + (A[C.i.0*8 + (C.i.1*2) + C.k]*B[C.k*3 + C.j])
          }
        }
      }
    }
  }
}
)");
}

TEST(LowerTest, SplitMultiLevelAndFactorOverExtent) {
  ir::Schedule sch(W("matmul:m=10,n=3,k=2"));
  ASSERT_TRUE(sch.Split("C", "i", {3, 2}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {8}).ok());
  ExpectLowered(sch, R"(func f(A[10, 2], B[2, 3], C[10, 3]) {
  for C.i.0 in 0..2 {
    for C.i.1 in 0..3 {
      for C.i.2 in 0..2 {
        for C.j.0 in 0..1 {
          for C.j.1 in 0..3 {
            if (C.i.0*6 + (C.i.1*2) + C.i.2) < 10 {
              C[C.i.0*18 + (C.i.1*6) + (C.i.2*3) + (C.j.0*3) + C.j.1] = 0f
            }
            for C.k in 0..2 {
              if (C.i.0*6 + (C.i.1*2) + C.i.2) < 10 {
                C[C.i.0*18 + (C.i.1*6) + (C.i.2*3) + (C.j.0*3) + C.j.1] = C[C.i.0*18 + (C.i.1*6) + (C.i.2*3) + (C.j.0*3) + C.j.1] + (A[C.i.0*12 + (C.i.1*4) + (C.i.2*2) + C.k]*B[C.k*3 + (C.j.0*3) + C.j.1])
              }
            }
          }
        }
      }
    }
  }
}
)");
}

TEST(LowerTest, Reorder) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2"));
  ASSERT_TRUE(sch.Reorder("C", {"k", "j", "i"}).ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  for C.j in 0..3 {
    for C.i in 0..4 {
      C[C.i*3 + C.j] = 0f
    }
  }
  for C.k in 0..2 {
    for C.j in 0..3 {
      for C.i in 0..4 {
        C[C.i*3 + C.j] = C[C.i*3 + C.j] + (A[C.i*2 + C.k]*B[C.k*3 + C.j])
      }
    }
  }
}
)");
}

TEST(LowerTest, Fuse) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2"));
  ASSERT_TRUE(sch.Fuse("C", {"i", "j"}).ok());
  // C's index i*3 + j is the fused loop's own variable again: 3*(f/3) + f%3 == f.
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  for C.i+j in 0..12 {
    C[C.i+j] = 0f
    for C.k in 0..2 {
      C[C.i+j] = C[C.i+j] + (A[(C.i+j/3)*2 + C.k]*B[C.k*3 + (C.i+j % 3)])
    }
  }
}
)");
}

TEST(LowerTest, Parallel) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2"));
  ASSERT_TRUE(sch.Parallel("C", "i").ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  parallel C.i in 0..4 {
    for C.j in 0..3 {
      C[C.i*3 + C.j] = 0f
      for C.k in 0..2 {
        C[C.i*3 + C.j] = C[C.i*3 + C.j] + (A[C.i*2 + C.k]*B[C.k*3 + C.j])
      }
    }
  }
}
)");
}

TEST(LowerTest, Vectorize) {
  ir::Schedule sch(W("matmul:m=4,n=8,k=2"));
  ASSERT_TRUE(sch.Reorder("C", {"k", "j"}).ok());
  ASSERT_TRUE(sch.Vectorize("C", "j").ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 8], C[4, 8]) {
  for C.i in 0..4 {
    vectorized C.j in 0..8 {
      C[C.i*8 + C.j] = 0f
    }
    for C.k in 0..2 {
      vectorized C.j in 0..8 {
        C[C.i*8 + C.j] = C[C.i*8 + C.j] + (A[C.i*2 + C.k]*B[C.k*8 + C.j])
      }
    }
  }
}
)");
  // The vector form itself.
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok());
  ExpectText(ir::ToText(codegen::VectorizeLoops(f->body)), R"(for C.i in 0..4 {
  C[ramp(C.i*8, 1, 8)] = x8(0f)
  for C.k in 0..2 {
    C[ramp(C.i*8, 1, 8)] = C[ramp(C.i*8, 1, 8)] + ((x8(A[C.i*2 + C.k]))*B[ramp(C.k*8, 1, 8)])
  }
}
)");
}

TEST(LowerTest, VectorizeGuardedLanesUseMasks) {
  ir::Schedule sch(W("matmul:m=2,n=6,k=1"));
  ASSERT_TRUE(sch.Split("C", "j", {4}).ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  ExpectText(ir::ToText(codegen::VectorizeLoops(f->body)), R"(for C.i in 0..2 {
  for C.j.0 in 0..2 {
    C[ramp(C.i*6 + (C.j.0*4), 1, 4)] = x4(0f) if (ramp(C.j.0*4, 1, 4)) < (x4(6))
    for C.k in 0..1 {
      C[ramp(C.i*6 + (C.j.0*4), 1, 4)] = C[ramp(C.i*6 + (C.j.0*4), 1, 4)] if (ramp(C.j.0*4, 1, 4)) < (x4(6)) + ((x4(A[C.i + C.k]))*B[ramp(C.k*6 + (C.j.0*4), 1, 4)] if (ramp(C.j.0*4, 1, 4)) < (x4(6))) if (ramp(C.j.0*4, 1, 4)) < (x4(6))
    }
  }
}
)");
  ExpectLowered(sch, R"(func f(A[2, 1], B[1, 6], C[2, 6]) {
  for C.i in 0..2 {
    for C.j.0 in 0..2 {
      vectorized C.j.1 in 0..4 {
        if (C.j.0*4 + C.j.1) < 6 {
          C[C.i*6 + (C.j.0*4) + C.j.1] = 0f
        }
        for C.k in 0..1 {
          if (C.j.0*4 + C.j.1) < 6 {
            C[C.i*6 + (C.j.0*4) + C.j.1] = C[C.i*6 + (C.j.0*4) + C.j.1] + (A[C.i + C.k]*B[C.k*6 + (C.j.0*4) + C.j.1])
          }
        }
      }
    }
  }
}
)");
}

// A tile that sticks out of the tensor in a row and in its vector lanes: the row guard does
// not depend on the lane, so it stays a scalar branch around the vector body; only the lane
// guard becomes a mask. (As one mask it covered the vector loads but not the broadcast load
// of A, which then read one row past a packed buffer: a segfault on GEMM 1024^3 with 5-row
// tiles.)
TEST(LowerTest, VectorizeKeepsLaneInvariantGuardsAsBranches) {
  ir::Schedule sch(W("matmul:m=3,n=6,k=1"));
  ASSERT_TRUE(sch.Split("C", "i", {2}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {4}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"i.0", "j.0", "i.1", "j.1"}).ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string text = ir::ToText(codegen::VectorizeLoops(f->body));
  EXPECT_NE(text.find("if (C.i.0*2 + C.i.1) < 3 {"), std::string::npos) << text;
  EXPECT_EQ(text.find("x4((C.i.0*2 + C.i.1) < 3)"), std::string::npos) << text;
  EXPECT_TRUE(testing::BuildAndCheck(sch, 3).ok());
}

TEST(LowerTest, Unroll) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2"));
  ASSERT_TRUE(sch.Unroll("C", "k").ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  for C.i in 0..4 {
    for C.j in 0..3 {
      C[C.i*3 + C.j] = 0f
      unrolled C.k in 0..2 {
        C[C.i*3 + C.j] = C[C.i*3 + C.j] + (A[C.i*2 + C.k]*B[C.k*3 + C.j])
      }
    }
  }
}
)");
}

TEST(LowerTest, CacheWriteComputedAt) {
  ir::Schedule sch(W("matmul:m=4,n=6,k=2"));
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  ASSERT_TRUE(sch.Split("C", "j", {3}).ok());
  ASSERT_TRUE(sch.ComputeAt("C.local", "C", "j.0").ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 6], C[4, 6]) {
  for C.i in 0..4 {
    for C.j.0 in 0..2 {
      alloc C.local[1, 3] float32 local
      for C.local.i in 0..1 {
        for C.local.j in 0..3 {
          C.local[C.local.i*3 + C.local.j] = 0f
          for C.local.k in 0..2 {
            C.local[C.local.i*3 + C.local.j] = C.local[C.local.i*3 + C.local.j] + (A[C.i*2 + (C.local.i*2) + C.local.k]*B[C.local.k*6 + (C.j.0*3) + C.local.j])
          }
        }
      }
      for C.j.1 in 0..3 {
        C[C.i*6 + (C.j.0*3) + C.j.1] = C.local[C.j.1]
      }
    }
  }
}
)");
}

TEST(LowerTest, CacheReadComputedAtCopiesACompactRegion) {
  ir::Schedule sch(W("matmul:m=4,n=6,k=3"));
  ASSERT_TRUE(sch.CacheRead("B", "local", {"C"}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {2}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"j.0", "i", "j.1"}).ok());
  ASSERT_TRUE(sch.ComputeAt("B.local", "C", "j.0").ok());
  ExpectLowered(sch, R"(func f(A[4, 3], B[3, 6], C[4, 6]) {
  for C.j.0 in 0..3 {
    alloc B.local[3, 2] float32 local
    for B.local.ax0 in 0..3 {
      for B.local.ax1 in 0..2 {
        B.local[B.local.ax0*2 + B.local.ax1] = B[B.local.ax0*6 + (C.j.0*2) + B.local.ax1]
      }
    }
    for C.i in 0..4 {
      for C.j.1 in 0..2 {
        C[C.i*6 + (C.j.0*2) + C.j.1] = 0f
        for C.k in 0..3 {
          C[C.i*6 + (C.j.0*2) + C.j.1] = C[C.i*6 + (C.j.0*2) + C.j.1] + (A[C.i*3 + C.k]*B.local[C.k*2 + C.j.1])
        }
      }
    }
  }
}
)");
}

TEST(LowerTest, ComputeAt) {
  ir::Schedule sch(W("matmul:m=4,n=3,k=2,epilogue=relu"));
  ASSERT_TRUE(sch.ComputeAt("matmul", "C", "i").ok());
  ExpectLowered(sch, R"(func f(A[4, 2], B[2, 3], C[4, 3]) {
  for C.i in 0..4 {
    alloc matmul[1, 3] float32 global
    for matmul.i in 0..1 {
      for matmul.j in 0..3 {
        matmul[matmul.i*3 + matmul.j] = 0f
        for matmul.k in 0..2 {
          matmul[matmul.i*3 + matmul.j] = matmul[matmul.i*3 + matmul.j] + (A[C.i*2 + (matmul.i*2) + matmul.k]*B[matmul.k*3 + matmul.j])
        }
      }
    }
    for C.j in 0..3 {
      C[C.i*3 + C.j] = max(matmul[C.j], 0f)
    }
  }
}
)");
}

TEST(LowerTest, ComputeInline) {
  ir::Schedule sch(W("conv2d:n=1,c=1,h=3,w=3,k=1,r=3,s=3,pad=1"));
  ASSERT_TRUE(sch.ComputeInline("pad").ok());
  ExpectLowered(sch, R"(func f(X[1, 1, 3, 3], W[1, 1, 3, 3], Y[1, 1, 3, 3]) {
  for Y.n in 0..1 {
    for Y.k in 0..1 {
      for Y.y in 0..3 {
        for Y.x in 0..3 {
          Y[Y.n*9 + (Y.k*9) + (Y.y*3) + Y.x] = 0f
          for Y.rc in 0..1 {
            for Y.ry in 0..3 {
              for Y.rx in 0..3 {
                Y[Y.n*9 + (Y.k*9) + (Y.y*3) + Y.x] = Y[Y.n*9 + (Y.k*9) + (Y.y*3) + Y.x] + ((select(((((Y.y + Y.ry) - 1) >= 0) && (((Y.y + Y.ry) - 1) < 3)) && ((((Y.x + Y.rx) - 1) >= 0) && (((Y.x + Y.rx) - 1) < 3)), X[(Y.n*9 + (Y.rc*9) + (Y.y*3) + (Y.ry*3) + Y.x + Y.rx) - 4], 0f))*W[Y.k*9 + (Y.rc*9) + (Y.ry*3) + Y.rx])
              }
            }
          }
        }
      }
    }
  }
}
)");
}

TEST(LowerTest, RFactor) {
  ir::Schedule sch(W("matmul:m=2,n=2,k=7"));
  ASSERT_TRUE(sch.RFactor("C", "k", 3).ok());
  ExpectLowered(sch, R"(func f(A[2, 7], B[7, 2], C[2, 2]) {
  alloc C.rf[3, 2, 2] float32 global
  for C.rf.k.rf in 0..3 {
    for C.rf.i in 0..2 {
      for C.rf.j in 0..2 {
        C.rf[C.rf.k.rf*4 + (C.rf.i*2) + C.rf.j] = 0f
        for C.rf.k.o in 0..3 {
          if (C.rf.k.o*3 + C.rf.k.rf) < 7 {
            C.rf[C.rf.k.rf*4 + (C.rf.i*2) + C.rf.j] = C.rf[C.rf.k.rf*4 + (C.rf.i*2) + C.rf.j] + (A[C.rf.i*7 + (C.rf.k.o*3) + C.rf.k.rf]*B[C.rf.k.o*6 + (C.rf.k.rf*2) + C.rf.j])
          }
        }
      }
    }
  }
  for C.i in 0..2 {
    for C.j in 0..2 {
      C[C.i*2 + C.j] = 0f
      for C.k.rf in 0..3 {
        C[C.i*2 + C.j] = C[C.i*2 + C.j] + C.rf[C.k.rf*4 + (C.i*2) + C.j]
      }
    }
  }
}
)");
}

TEST(LowerTest, StorageScope) {
  ir::Schedule sch(W("matmul:m=2,n=3,k=2,epilogue=bias"));
  ASSERT_TRUE(sch.StorageScope("matmul", "local").ok());
  ExpectLowered(sch, R"(func f(A[2, 2], B[2, 3], bias[3], C[2, 3]) {
  alloc matmul[2, 3] float32 local
  for matmul.i in 0..2 {
    for matmul.j in 0..3 {
      matmul[matmul.i*3 + matmul.j] = 0f
      for matmul.k in 0..2 {
        matmul[matmul.i*3 + matmul.j] = matmul[matmul.i*3 + matmul.j] + (A[matmul.i*2 + matmul.k]*B[matmul.k*3 + matmul.j])
      }
    }
  }
  for C.i in 0..2 {
    for C.j in 0..3 {
      C[C.i*3 + C.j] = matmul[C.i*3 + C.j] + bias[C.j]
    }
  }
}
)");
}

// ---- invalid traces and schedules fail with a message, never crash ----

ir::Trace TraceOf(const ir::Workload& w, std::vector<ir::Instruction> insts) {
  ir::Trace t;
  t.workload = w.canonical;
  t.instructions = std::move(insts);
  return t;
}

void ExpectTraceError(const ir::Workload& w, std::vector<ir::Instruction> insts,
                      std::vector<std::string> words) {
  auto sch = ir::ApplyTrace(w, TraceOf(w, std::move(insts)));
  ASSERT_FALSE(sch.ok());
  EXPECT_EQ(sch.status().code(), absl::StatusCode::kInvalidArgument) << sch.status();
  for (const std::string& word : words) {
    EXPECT_NE(sch.status().message().find(word), std::string::npos)
        << "'" << word << "' not in: " << sch.status().message();
  }
}

TEST(LowerTest, InvalidTracesFailNamingThePrimitiveAndLoop) {
  ir::Workload w = W("matmul:m=4,n=3,k=2");
  ExpectTraceError(w, {{.kind = "split", .stage = "C", .loops = {"q"}, .factors = {2}}},
                   {"instruction 0", "split", "'q'", "'C'"});
  ExpectTraceError(w, {{.kind = "split", .stage = "C", .loops = {"i"}, .factors = {0}}},
                   {"split", "factor 0", "'i'"});
  ExpectTraceError(w,
                   {{.kind = "split", .stage = "C", .loops = {"i"}, .factors = {2}},
                    {.kind = "vectorize", .stage = "C", .loops = {"i"}}},
                   {"instruction 1", "vectorize", "'i'"});
  ExpectTraceError(w, {{.kind = "vectorize", .stage = "C", .loops = {"nope"}}},
                   {"vectorize", "'nope'"});
  ExpectTraceError(w, {{.kind = "frobnicate", .stage = "C"}}, {"unknown", "'frobnicate'"});
  ExpectTraceError(w, {{.kind = "split", .stage = "C", .loops = {}, .factors = {2}}},
                   {"split", "one loop"});
  ExpectTraceError(w, {{.kind = "rfactor", .stage = "C", .loops = {"k"}}}, {"rfactor"});
  ExpectTraceError(w, {{.kind = "compute_at", .stage = "C", .target = "C", .target_loop = "i"}},
                   {"compute_at"});
  ExpectTraceError(w, {{.kind = "parallel", .stage = "nope", .loops = {"i"}}},
                   {"parallel", "'nope'"});
  ExpectTraceError(w, {{.kind = "bind", .stage = "C", .loops = {"i"}, .tag = "warp.x"}},
                   {"bind", "'warp.x'"});

  // A trace of another workload.
  ir::Trace other = TraceOf(W("matmul:m=5,n=3,k=2"), {});
  auto sch = ir::ApplyTrace(w, other);
  ASSERT_FALSE(sch.ok());
  EXPECT_EQ(sch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(sch.status().message().find("m=5"), std::string::npos) << sch.status();

  // Malformed JSON and unknown fields.
  EXPECT_FALSE(traceio::TraceFromJson("").ok());
  EXPECT_FALSE(traceio::TraceFromJson(R"({"version": 1, "bogus": 3})").ok());
  EXPECT_FALSE(
      traceio::TraceFromJson(R"({"instructions": [{"kind": "split", "factors": ["x"]}]})").ok());
}

TEST(LowerTest, ComputeAtLoopSplitAfterwardsFailsToLower) {
  ir::Schedule sch(W("matmul:m=8,n=4,k=2,epilogue=relu"));
  ASSERT_TRUE(sch.ComputeAt("matmul", "C", "i").ok());
  ASSERT_TRUE(sch.Split("C", "i", {2}).ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("'i'"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("'matmul'"), std::string::npos) << f.status();
  // The same through a replayed trace.
  auto replay = ir::ApplyTrace(sch.workload(), sch.trace());
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_FALSE(codegen::Lower(*replay, "f", codegen::LowerOptions::StructuralOnly()).ok());
}

TEST(LowerTest, ComputeAtInsideALoopOfAnotherConsumerFailsToLower) {
  // row_max is read by exp_sum and Y; exp_sum is computed at Y.i, row_max deeper at Y.j, so
  // exp_sum would read row_max before it exists. Lowering must refuse, naming the loop.
  ir::Schedule sch(W("softmax:m=3,n=7"));
  ASSERT_TRUE(sch.ComputeAt("exp_sum", "Y", "i").ok());
  absl::Status at = sch.ComputeAt("row_max", "Y", "j");
  if (!at.ok()) {  // refusing it in the schedule is as good
    EXPECT_EQ(at.code(), absl::StatusCode::kInvalidArgument) << at;
    return;
  }
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_FALSE(f.ok()) << "lowered an invalid attachment:\n" << ir::ToText(*f);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find("'j'"), std::string::npos) << f.status();
}

// ---- the C ABI ----

TEST(LowerTest, WrongNumArgsReturnsNonZeroWithoutTouchingMemory) {
  ir::Workload w = W("matmul:m=5,n=7,k=3,epilogue=bias");
  ir::Schedule sch(w);
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  auto k = codegen::JitCompile(*f);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<std::vector<float>> args = ir::AllocateArgs(w);
  ir::FillRandomInputs(args, 7);
  std::fill(args.back().begin(), args.back().end(), -777.0f);
  std::vector<void*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  for (int n : {0, 1, 3, 5, -1, 1 << 30}) {
    EXPECT_NE((*k)->Run(ptrs.data(), n), 0) << "num_args " << n;
  }
  EXPECT_NE((*k)->Run(nullptr, 4), 0);
  for (float v : args.back()) ASSERT_EQ(v, -777.0f) << "output touched on a refused call";
  EXPECT_EQ((*k)->Run(ptrs.data(), 4), 0);
  EXPECT_NE(args.back()[0], -777.0f);
}

TEST(LowerTest, ConcurrentCallsOnSeparateBuffersAgreeWithReference) {
  ir::Workload w = W("matmul:m=33,n=40,k=17,epilogue=bias_relu");
  ir::Schedule sch(w);
  ASSERT_TRUE(sch.Split("C", "j", {8}).ok());
  ASSERT_TRUE(sch.ComputeAt("matmul", "C", "j.0").ok());
  ASSERT_TRUE(sch.Parallel("C", "i").ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  auto f = codegen::Lower(sch, "f");
  ASSERT_TRUE(f.ok()) << f.status();
  auto k = codegen::JitCompile(*f);
  ASSERT_TRUE(k.ok()) << k.status();
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<float>>> args(kThreads), refs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    args[t] = ir::AllocateArgs(w);
    ir::FillRandomInputs(args[t], 100 + t);
    refs[t] = args[t];
    ASSERT_TRUE(ir::ComputeReference(w, refs[t]).ok());
  }
  std::vector<int> rc(kThreads, -1);
  std::vector<absl::Status> st(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> ptrs;
      for (auto& a : args[t]) ptrs.push_back(a.data());
      for (int rep = 0; rep < 20; ++rep) {
        std::fill(args[t].back().begin(), args[t].back().end(), 12345.0f);
        rc[t] = (*k)->Run(ptrs.data(), static_cast<int>(ptrs.size()));
        st[t] = ir::CheckOutput(args[t].back(), refs[t].back(), w.output()->shape);
        if (rc[t] != 0 || !st[t].ok()) break;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(rc[t], 0) << "thread " << t;
    EXPECT_TRUE(st[t].ok()) << "thread " << t << ": " << st[t];
  }
}

}  // namespace
}  // namespace lathe

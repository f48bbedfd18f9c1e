// \file
// Scalar and vector value types of the tensor IR.
#ifndef LATHE_IR_TYPE_H_
#define LATHE_IR_TYPE_H_

#include <cstdint>
#include <string>

namespace lathe::ir {

enum class ScalarKind : uint8_t { kFloat32, kInt64, kBool };

// A scalar kind with a lane count; lanes > 1 only appears after vectorization.
struct Type {
  ScalarKind kind = ScalarKind::kFloat32;
  int lanes = 1;

  static Type F32(int lanes = 1) { return {ScalarKind::kFloat32, lanes}; }
  static Type I64(int lanes = 1) { return {ScalarKind::kInt64, lanes}; }
  static Type Bool(int lanes = 1) { return {ScalarKind::kBool, lanes}; }

  bool is_float() const { return kind == ScalarKind::kFloat32; }
  bool is_int() const { return kind == ScalarKind::kInt64; }
  bool is_bool() const { return kind == ScalarKind::kBool; }
  bool is_vector() const { return lanes > 1; }
  Type WithLanes(int n) const { return {kind, n}; }
  Type Element() const { return {kind, 1}; }
  // Size of one element in bytes.
  int bytes() const {
    return kind == ScalarKind::kFloat32 ? 4 : kind == ScalarKind::kInt64 ? 8 : 1;
  }

  bool operator==(const Type& o) const { return kind == o.kind && lanes == o.lanes; }
  bool operator!=(const Type& o) const { return !(*this == o); }
  // "float32", "int64", "bool", with "x8" appended for vectors.
  std::string ToString() const;
};

}  // namespace lathe::ir

#endif  // LATHE_IR_TYPE_H_

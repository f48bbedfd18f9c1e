// \file
// The model graph: what the ONNX importer produces and the graph passes rewrite. It is
// lathe's own (no protobuf type appears here): values with static shapes and, for constants,
// their data; nodes with the ONNX op type, attributes and value names. Shapes are static
// after import (dynamic dimensions are fixed by the caller's input shapes).
#ifndef LATHE_MODEL_GRAPH_H_
#define LATHE_MODEL_GRAPH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::model {

// Constant data: float32 tensors (weights) or int64 tensors (shapes, indices, axes). Other
// ONNX element types are converted on import (int32, bool, ... to int64; double to float).
struct ConstData {
  bool is_int = false;
  std::vector<float> f;
  std::vector<int64_t> i;

  int64_t size() const {
    return is_int ? static_cast<int64_t>(i.size()) : static_cast<int64_t>(f.size());
  }
  double at(int64_t k) const { return is_int ? static_cast<double>(i[k]) : f[k]; }
  // Element k as an integer: float values are truncated, saturated to the int64 range, and
  // NaN is 0 (a float shape operand from a hostile file must not be undefined behaviour).
  int64_t IntAt(int64_t k) const { return is_int ? i[k] : SaturatingInt64(f[k]); }

  static int64_t SaturatingInt64(double v);
};

struct Value {
  std::string name;
  std::vector<int64_t> shape;
  bool is_int = false;                // element type int64 (shape arithmetic); else float32
  std::optional<ConstData> constant;  // set for initializers, Constant outputs, folded values
};

struct Attr {
  enum Kind { kInt, kFloat, kInts, kFloats, kString, kTensor } kind = kInt;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string s;
  std::vector<int64_t> tensor_shape;
  ConstData tensor;
};

struct Node {
  std::string name;                 // the ONNX node name, or "<op>_<index>" when it had none
  std::string op;                   // ONNX op type
  std::vector<std::string> inputs;  // value names; "" for an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attr> attrs;

  const Attr* attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : &it->second;
  }
  int64_t Int(const std::string& key, int64_t fallback) const;
  float Float(const std::string& key, float fallback) const;
  std::string Str(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> Ints(const std::string& key, std::vector<int64_t> fallback = {}) const;
};

struct Graph {
  int64_t opset = 13;
  std::vector<Node> nodes;  // topological order
  std::map<std::string, Value> values;
  std::vector<std::string> inputs;   // graph inputs (not initializers), in order
  std::vector<std::string> outputs;  // graph outputs, in order

  Value* Find(const std::string& name);
  const Value* Find(const std::string& name) const;
  // The constant data of `name`, or null when it is not a constant.
  const ConstData* Const(const std::string& name) const;
  // Adds a constant value named after `hint` (made unique) and returns its name.
  std::string AddConst(const std::string& hint, std::vector<int64_t> shape, ConstData data);
};

// "[1,3,224,224]" for messages.
std::string ShapeText(const std::vector<int64_t>& shape);
// The product of the extents: 0 where any extent is 0, INT64_MAX where the product overflows.
// Meant for shapes already checked by CheckedNumElements (or built from checked ones): it
// does not refuse negative extents, and a saturated count is no error message.
int64_t NumElements(const std::vector<int64_t>& shape);

// The most elements one tensor of a model may have (2^31: 8 GiB of float32). Shapes from a
// model file, from --input and from inference are checked against it before anything is
// allocated or multiplied further, so element counts and byte sizes (at most 8 bytes an
// element) never overflow int64.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 31;

// The element count of `shape`, computed without overflow: InvalidArgument for a negative
// extent or a count above kMaxTensorElements (the message names the shape and the limit, to
// be prefixed with what the shape belongs to). Zero extents are allowed (an empty tensor).
absl::StatusOr<int64_t> CheckedNumElements(const std::vector<int64_t>& shape);

// The error every unsupported construct gets: InvalidArgument naming the node, its op and
// what is missing, e.g. "node 'conv_3' (Conv): 3-d convolution is not supported".
absl::Status Unsupported(const Node& node, const std::string& what);

}  // namespace lathe::model

#endif  // LATHE_MODEL_GRAPH_H_

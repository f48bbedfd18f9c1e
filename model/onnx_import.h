// \file
// Reading ONNX models into a model::Graph: the file is parsed with the official protobuf
// schema of Debian's libonnx, its tensor sizes checked (no negative extent, no overflow, at
// most kMaxTensorElements elements), checked with libonnx's checker, given the caller's input
// shapes (for dynamic dimensions), its nodes' attributes validated (model/validate.h), shapes
// inferred and constants folded by lathe (model/infer.h), and only then run through libonnx's
// shape inference to cross-check the shapes: a hostile file meets lathe's checks before any
// code that divides by or indexes with what it says. Initializers and Constant nodes become
// constant values (weights are kept). libonnx and protobuf types stay in onnx_import.cc.
#ifndef LATHE_MODEL_ONNX_IMPORT_H_
#define LATHE_MODEL_ONNX_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/graph.h"

namespace lathe::model {

// One `--input NAME=SHAPE` (SHAPE written 1x3x224x224).
struct InputShape {
  std::string name;
  std::vector<int64_t> shape;
};

// Parses `NAME=SHAPE` arguments; InvalidArgument naming the malformed one.
absl::StatusOr<std::vector<InputShape>> ParseInputShapes(const std::vector<std::string>& args);

// Imports the model at `path`. Every graph input must be float32 with a static shape once
// `shapes` are applied: a dynamic dimension without a given shape, a given shape of the wrong
// rank or contradicting a fixed dimension, or a name that is no input are InvalidArgument
// errors naming it, as are unreadable, malformed or invalid files (the checker's message is
// kept). The result is in topological order with every value's shape and element type set
// by lathe's own inference (model/infer.h), cross-checked with ONNX's.
absl::StatusOr<Graph> ImportOnnx(const std::string& path, const std::vector<InputShape>& shapes);

// The same from the bytes of a serialized ModelProto (`what` names it in messages).
absl::StatusOr<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& what,
                                      const std::vector<InputShape>& shapes);

// A TensorProto file (the test data of ONNX's conformance cases): its name, shape and data.
struct TensorFile {
  std::string name;
  std::vector<int64_t> shape;
  ConstData data;
};
absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path);

// ImportOnnx with some graph inputs frozen to the given tensors (they become initializers
// before the checker runs): conformance cases pass shapes, axes or scales as inputs.
absl::StatusOr<Graph> ImportOnnxFrozen(const std::string& path,
                                       const std::vector<InputShape>& shapes,
                                       const std::vector<std::string>& frozen_tensor_files);

}  // namespace lathe::model

#endif  // LATHE_MODEL_ONNX_IMPORT_H_

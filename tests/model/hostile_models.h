// \file
// Test helper: small ONNX models built as protobuf messages (libonnx's onnx.pb.h), the way a
// hostile file could be written: whatever dims, data and attributes the test asks for, with
// no check of its own. Used by hostile_model_test.cc.
#ifndef LATHE_TESTS_MODEL_HOSTILE_MODELS_H_
#define LATHE_TESTS_MODEL_HOSTILE_MODELS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"

namespace lathe::model::testing {

class OnnxModel {
 public:
  explicit OnnxModel(int64_t opset = 13) {
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("hostile");
  }

  // A float32 graph input of the given shape.
  OnnxModel& Input(const std::string& name, std::vector<int64_t> shape) {
    AddValueInfo(model_.mutable_graph()->add_input(), name, shape);
    return *this;
  }
  // A float32 graph output of the given rank (its extents left symbolic).
  OnnxModel& Output(const std::string& name, int rank) {
    onnx::ValueInfoProto* v = model_.mutable_graph()->add_output();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = tt->mutable_shape();
    for (int d = 0; d < rank; ++d) shape->add_dim()->set_dim_param(absl::StrCat("d", d));
    return *this;
  }
  // A float32 initializer: `dims` as given, `raw_bytes` bytes of raw data (zeros).
  OnnxModel& RawFloats(const std::string& name, std::vector<int64_t> dims, size_t raw_bytes) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(raw_bytes, '\0'));
    return *this;
  }
  OnnxModel& Floats(const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
    return *this;
  }
  OnnxModel& Ints(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> v) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t x : v) t->add_int64_data(x);
    return *this;
  }
  OnnxModel& Scalar(const std::string& name, int64_t v) { return Ints(name, {}, {v}); }

  // A node; `ints` are INTS attributes, `int_attrs` INT attributes.
  OnnxModel& Node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                  std::vector<std::pair<std::string, std::vector<int64_t>>> ints = {},
                  std::vector<std::pair<std::string, int64_t>> int_attrs = {}) {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(absl::StrCat(op, "_", model_.graph().node_size() - 1));
    for (const std::string& s : in) n->add_input(s);
    for (const std::string& s : out) n->add_output(s);
    for (const auto& [key, values] : ints) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(key);
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : values) a->add_ints(v);
    }
    for (const auto& [key, value] : int_attrs) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(key);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(value);
    }
    return *this;
  }

  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  static void AddValueInfo(onnx::ValueInfoProto* v, const std::string& name,
                           const std::vector<int64_t>& shape) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }

  onnx::ModelProto model_;
};

}  // namespace lathe::model::testing

#endif  // LATHE_TESTS_MODEL_HOSTILE_MODELS_H_

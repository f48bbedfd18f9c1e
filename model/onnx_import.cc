#include "model/onnx_import.h"

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/infer.h"
#include "model/validate.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace lathe::model {
namespace {

// libonnx's messages span lines ("\n\n==> Context: ..."); an error is one line.
std::string OneLine(const char* text) {
  std::string out;
  for (const char* p = text; *p != '\0'; ++p) {
    const bool space = *p == '\n' || *p == '\r' || *p == '\t' || *p == ' ';
    if (space) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
      continue;
    }
    out.push_back(*p);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

absl::Status Bad(const std::string& what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
}

// The element count of a TensorProto's dims, checked (no negative extent, no overflow, at most
// kMaxTensorElements) before anything reads its data.
absl::StatusOr<int64_t> TensorCount(const onnx::TensorProto& t, const std::string& where) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  absl::StatusOr<int64_t> count = CheckedNumElements(dims);
  if (!count.ok()) {
    return Bad(where, absl::StrCat("tensor '", t.name(), "': ", count.status().message()));
  }
  return count;
}

// The data of a TensorProto as float32 or int64 (raw_data or the typed fields).
absl::StatusOr<ConstData> TensorData(const onnx::TensorProto& t, const std::string& where) {
  ConstData d;
  absl::StatusOr<int64_t> checked = TensorCount(t, where);
  if (!checked.ok()) return checked.status();
  const int64_t count = *checked;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return Bad(where, absl::StrCat("tensor '", t.name(),
                                   "' keeps its data in an external file, "
                                   "which is not supported"));
  }
  const std::string& raw = t.raw_data();
  auto from_raw = [&](auto tag, auto&& convert) -> absl::Status {
    using T = decltype(tag);
    if (raw.size() != static_cast<size_t>(count) * sizeof(T)) {
      return Bad(where, absl::StrCat("tensor '", t.name(), "' holds ", raw.size(),
                                     " bytes of data for ", count, " elements"));
    }
    for (int64_t k = 0; k < count; ++k) {
      T v;
      std::memcpy(&v, raw.data() + k * sizeof(T), sizeof(T));
      convert(v);
    }
    return absl::OkStatus();
  };
  auto check_count = [&](int64_t got) -> absl::Status {
    if (got != count) {
      return Bad(where, absl::StrCat("tensor '", t.name(), "' holds ", got, " values for shape [",
                                     absl::StrJoin(t.dims(), ","), "]"));
    }
    return absl::OkStatus();
  };
  absl::Status st;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) {
        st = from_raw(float{}, [&](float v) { d.f.push_back(v); });
      } else {
        d.f.assign(t.float_data().begin(), t.float_data().end());
        st = check_count(static_cast<int64_t>(d.f.size()));
      }
      break;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) {
        st = from_raw(double{}, [&](double v) { d.f.push_back(static_cast<float>(v)); });
      } else {
        for (double v : t.double_data()) d.f.push_back(static_cast<float>(v));
        st = check_count(static_cast<int64_t>(d.f.size()));
      }
      break;
    case onnx::TensorProto::INT64:
      d.is_int = true;
      if (!raw.empty()) {
        st = from_raw(int64_t{}, [&](int64_t v) { d.i.push_back(v); });
      } else {
        d.i.assign(t.int64_data().begin(), t.int64_data().end());
        st = check_count(static_cast<int64_t>(d.i.size()));
      }
      break;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::BOOL: {
      d.is_int = true;
      const int type = t.data_type();
      if (!raw.empty()) {
        if (type == onnx::TensorProto::INT32) {
          st = from_raw(int32_t{}, [&](int32_t v) { d.i.push_back(v); });
        } else if (type == onnx::TensorProto::INT16) {
          st = from_raw(int16_t{}, [&](int16_t v) { d.i.push_back(v); });
        } else if (type == onnx::TensorProto::UINT16) {
          st = from_raw(uint16_t{}, [&](uint16_t v) { d.i.push_back(v); });
        } else if (type == onnx::TensorProto::INT8) {
          st = from_raw(int8_t{}, [&](int8_t v) { d.i.push_back(v); });
        } else {
          st = from_raw(uint8_t{}, [&](uint8_t v) { d.i.push_back(v); });
        }
      } else {
        for (int32_t v : t.int32_data()) d.i.push_back(v);
        st = check_count(static_cast<int64_t>(d.i.size()));
      }
      break;
    }
    default:
      return Bad(where, absl::StrCat("tensor '", t.name(), "' has element type ",
                                     onnx::TensorProto::DataType_Name(
                                         static_cast<onnx::TensorProto::DataType>(t.data_type())),
                                     ", which is not supported (float32 and integers are)"));
  }
  if (!st.ok()) return st;
  return d;
}

absl::StatusOr<Attr> ConvertAttr(const onnx::AttributeProto& a, const std::string& where) {
  Attr out;
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      out.kind = Attr::kInt;
      out.i = a.i();
      break;
    case onnx::AttributeProto::FLOAT:
      out.kind = Attr::kFloat;
      out.f = a.f();
      break;
    case onnx::AttributeProto::INTS:
      out.kind = Attr::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::FLOATS:
      out.kind = Attr::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::STRING:
      out.kind = Attr::kString;
      out.s = a.s();
      break;
    case onnx::AttributeProto::TENSOR: {
      out.kind = Attr::kTensor;
      absl::StatusOr<ConstData> d = TensorData(a.t(), where);
      if (!d.ok()) return d.status();
      out.tensor = *std::move(d);
      out.tensor_shape.assign(a.t().dims().begin(), a.t().dims().end());
      break;
    }
    default:
      return Bad(where, absl::StrCat("attribute '", a.name(), "' of type ",
                                     onnx::AttributeProto::AttributeType_Name(a.type()),
                                     " is not supported"));
  }
  return out;
}

// Applies the caller's shapes to the graph inputs; every dimension must end up static.
absl::Status ApplyInputShapes(onnx::GraphProto* g, const std::set<std::string>& initializers,
                              const std::vector<InputShape>& shapes, const std::string& what) {
  std::map<std::string, const InputShape*> given;
  for (const InputShape& s : shapes) given[s.name] = &s;
  std::vector<std::string> names;
  for (onnx::ValueInfoProto& in : *g->mutable_input()) {
    if (initializers.count(in.name())) continue;
    names.push_back(in.name());
    if (!in.type().has_tensor_type()) return Bad(what, "input '" + in.name() + "' is not a tensor");
    onnx::TypeProto_Tensor* tt = in.mutable_type()->mutable_tensor_type();
    if (tt->elem_type() != onnx::TensorProto::FLOAT) {
      return Bad(what, absl::StrCat("input '", in.name(), "' has element type ",
                                    onnx::TensorProto::DataType_Name(
                                        static_cast<onnx::TensorProto::DataType>(tt->elem_type())),
                                    "; only float32 inputs are supported"));
    }
    std::vector<std::string> model_dims;
    for (const auto& d : tt->shape().dim()) {
      model_dims.push_back(d.has_dim_value() && d.dim_value() > 0 ? std::to_string(d.dim_value())
                           : d.has_dim_param()                    ? d.dim_param()
                                                                  : "?");
    }
    const std::string model_shape = "[" + absl::StrJoin(model_dims, ",") + "]";
    auto it = given.find(in.name());
    if (it != given.end()) {
      const std::vector<int64_t>& s = it->second->shape;
      if (tt->has_shape() && tt->shape().dim_size() != static_cast<int>(s.size())) {
        return Bad(what, absl::StrCat("input '", in.name(), "' has rank ", tt->shape().dim_size(),
                                      " ", model_shape, ", the given shape ", ShapeText(s),
                                      " rank ", s.size()));
      }
      for (int d = 0; tt->has_shape() && d < tt->shape().dim_size(); ++d) {
        const auto& dim = tt->shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() > 0 && dim.dim_value() != s[d]) {
          return Bad(what, absl::StrCat("the given shape ", ShapeText(s), " of input '", in.name(),
                                        "' does not match the model's ", model_shape,
                                        " in dimension ", d));
        }
      }
      tt->mutable_shape()->clear_dim();
      for (int64_t v : s) tt->mutable_shape()->add_dim()->set_dim_value(v);
      given.erase(it);
      continue;
    }
    if (!tt->has_shape()) {
      return Bad(what, absl::StrCat("input '", in.name(), "' has no shape; give one with --input ",
                                    in.name(), "=SHAPE"));
    }
    for (const auto& d : tt->shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() <= 0) {
        return Bad(what, absl::StrCat("input '", in.name(), "' has the dynamic shape ", model_shape,
                                      "; give its shape with --input ", in.name(),
                                      "=SHAPE (e.g. 1x3x224x224)"));
      }
    }
  }
  for (const onnx::ValueInfoProto& in : g->input()) {
    if (initializers.count(in.name())) continue;
    std::vector<int64_t> dims;
    for (const auto& d : in.type().tensor_type().shape().dim()) dims.push_back(d.dim_value());
    if (absl::StatusOr<int64_t> n = CheckedNumElements(dims); !n.ok()) {
      return Bad(what, absl::StrCat("input '", in.name(), "': ", n.status().message()));
    }
  }
  if (!given.empty()) {
    return Bad(what, absl::StrCat("--input names '", given.begin()->first,
                                  "', which is not an input of the model (its inputs: ",
                                  absl::StrJoin(names, ", "), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<InputShape>> ParseInputShapes(const std::vector<std::string>& args) {
  std::vector<InputShape> out;
  for (const std::string& a : args) {
    const size_t eq = a.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == a.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input '", a, "' must be NAME=SHAPE (e.g. x=1x3x224x224)"));
    }
    InputShape s;
    s.name = a.substr(0, eq);
    for (absl::string_view part : absl::StrSplit(a.substr(eq + 1), 'x')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(part, &v) || v <= 0 || v > (int64_t{1} << 24)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--input '", a, "': shape must be positive extents joined by 'x' (e.g. 1x3x224x224)"));
      }
      s.shape.push_back(v);
    }
    for (const InputShape& o : out) {
      if (o.name == s.name) {
        return absl::InvalidArgumentError(absl::StrCat("--input '", s.name, "' given twice"));
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<Graph> ImportOnnx(const std::string& path, const std::vector<InputShape>& shapes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read model file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ImportOnnxBytes(ss.str(), path, shapes);
}

namespace {

absl::StatusOr<std::string> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Graph> ImportModel(onnx::ModelProto& model, const std::string& what,
                                  const std::vector<InputShape>& shapes);

}  // namespace

absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadBytes(path);
  if (!bytes.ok()) return bytes.status();
  onnx::TensorProto t;
  if (!t.ParseFromString(*bytes)) return Bad(path, "not a TensorProto");
  absl::StatusOr<ConstData> d = TensorData(t, path);
  if (!d.ok()) return d.status();
  TensorFile f;
  f.name = t.name();
  f.shape.assign(t.dims().begin(), t.dims().end());
  f.data = *std::move(d);
  return f;
}

absl::StatusOr<Graph> ImportOnnxFrozen(const std::string& path,
                                       const std::vector<InputShape>& shapes,
                                       const std::vector<std::string>& frozen_tensor_files) {
  absl::StatusOr<std::string> bytes = ReadBytes(path);
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes))
    return Bad(path, "not an ONNX model (the protobuf does not parse)");
  for (const std::string& f : frozen_tensor_files) {
    absl::StatusOr<std::string> tb = ReadBytes(f);
    if (!tb.ok()) return tb.status();
    onnx::TensorProto* t = model.mutable_graph()->add_initializer();
    if (!t->ParseFromString(*tb)) return Bad(f, "not a TensorProto");
  }
  return ImportModel(model, path, shapes);
}

absl::StatusOr<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& what,
                                      const std::vector<InputShape>& shapes) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes)) {
    return Bad(what, "not an ONNX model (the protobuf does not parse)");
  }
  return ImportModel(model, what, shapes);
}

namespace {

absl::StatusOr<Graph> ImportModel(onnx::ModelProto& model, const std::string& what,
                                  const std::vector<InputShape>& shapes) {
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return Bad(what, "not an ONNX model (it has no graph nodes)");
  }
  // Tensor sizes first: the checker and everything after it multiply these dims.
  for (const auto& t : model.graph().initializer()) {
    if (absl::StatusOr<int64_t> n = TensorCount(t, what); !n.ok()) return n.status();
  }
  for (const auto& np : model.graph().node()) {
    for (const auto& a : np.attribute()) {
      if (!a.has_t()) continue;
      if (absl::StatusOr<int64_t> n = TensorCount(a.t(), what); !n.ok()) return n.status();
    }
  }
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return Bad(what, absl::StrCat("invalid ONNX model: ", OneLine(e.what())));
  }
  Graph g;
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") g.opset = op.version();
  }
  onnx::GraphProto* gp = model.mutable_graph();
  std::set<std::string> initializers;
  for (const auto& t : gp->initializer()) initializers.insert(t.name());
  if (absl::Status s = ApplyInputShapes(gp, initializers, shapes, what); !s.ok()) return s;
  // lathe's nodes, checked before any shape inference runs on them (libonnx's divides by
  // strides and indexes with perms and window attributes as the file gives them).
  int index = 0;
  for (const auto& np : gp->node()) {
    Node n;
    n.op = np.op_type();
    n.name = np.name().empty() ? absl::StrCat(n.op, "_", index) : np.name();
    ++index;
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      return Unsupported(n,
                         absl::StrCat("operators of domain '", np.domain(), "' are not supported"));
    }
    for (const auto& a : np.attribute()) {
      absl::StatusOr<Attr> at = ConvertAttr(a, absl::StrCat("node '", n.name, "' (", n.op, ")"));
      if (!at.ok()) return at.status();
      n.attrs[a.name()] = *std::move(at);
    }
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    g.nodes.push_back(std::move(n));
  }
  if (absl::Status s = ValidateNodes(g); !s.ok()) return s;
  // Values: inputs, initializers, then node outputs (shapes from lathe's inference below).
  for (const auto& in : gp->input()) {
    if (initializers.count(in.name())) continue;
    Value v;
    v.name = in.name();
    for (const auto& d : in.type().tensor_type().shape().dim()) v.shape.push_back(d.dim_value());
    g.values[v.name] = v;
    g.inputs.push_back(v.name);
  }
  for (const auto& t : gp->initializer()) {
    absl::StatusOr<ConstData> d = TensorData(t, what);
    if (!d.ok()) return d.status();
    Value v;
    v.name = t.name();
    v.shape.assign(t.dims().begin(), t.dims().end());
    v.is_int = d->is_int;
    v.constant = *std::move(d);
    g.values[v.name] = std::move(v);
  }
  for (const auto& out : gp->output()) g.outputs.push_back(out.name());
  if (absl::Status s = InferAndFold(g); !s.ok()) return s;
  // libonnx's shape inference runs last, on a graph that lathe's own inference has accepted
  // (every attribute and every input shape checked): only to cross-check the shapes.
  try {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*strict=*/0, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    return Bad(what, absl::StrCat("ONNX shape inference failed: ", OneLine(e.what())));
  }

  // ONNX's inferred shapes, to cross-check lathe's own.
  std::map<std::string, std::vector<int64_t>> onnx_shapes;
  for (const auto& vi : gp->value_info()) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
    std::vector<int64_t> s;
    bool known = true;
    for (const auto& d : vi.type().tensor_type().shape().dim()) {
      known = known && d.has_dim_value();
      s.push_back(d.dim_value());
    }
    if (known) onnx_shapes[vi.name()] = s;
  }
  for (const auto& [name, shape] : onnx_shapes) {
    const Value* v = g.Find(name);
    if (v && !v->constant && v->shape != shape) {
      return absl::InternalError(absl::StrCat("shape of '", name, "': lathe infers ",
                                              ShapeText(v->shape), ", ONNX ", ShapeText(shape)));
    }
  }
  for (const std::string& o : g.outputs) {
    const Value* v = g.Find(o);
    if (v == nullptr) return Bad(what, "graph output '" + o + "' is produced by no node");
    if (v->is_int)
      return Bad(what, "graph output '" + o + "' is not float32, which is not supported");
  }
  return g;
}

}  // namespace

}  // namespace lathe::model

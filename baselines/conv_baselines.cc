// \file
// oneDNN convolution baseline (baselines/conv_baselines.h).
#include "baselines/conv_baselines.h"

#include <omp.h>

#include <exception>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baselines/gemm_baselines.h"
#include "dnnl.hpp"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/workload.h"

namespace lathe::baselines {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

std::string RuntimeName() {
  const dnnl_version_t* v = dnnl_version();
  const char* rt = "unknown";
  switch (v->cpu_runtime) {
    case DNNL_RUNTIME_OMP:
      rt = "omp";
      break;
    case DNNL_RUNTIME_TBB:
      rt = "tbb";
      break;
    case DNNL_RUNTIME_SEQ:
      rt = "seq";
      break;
    case DNNL_RUNTIME_THREADPOOL:
      rt = "threadpool";
      break;
    default:
      break;
  }
  return absl::StrCat(v->major, ".", v->minor, ".", v->patch, " ", rt);
}

// A readable name of a (possibly blocked) memory layout: oneDNN's own format string.
std::string LayoutName(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "non-blocked";
  std::string out;
  for (int i = 0; i < d.ndims; ++i) out += static_cast<char>('a' + i);
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  for (int i = 0; i < b.inner_nblks; ++i) {
    absl::StrAppend(&out, b.inner_blks[i],
                    std::string(1, static_cast<char>('a' + b.inner_idxs[i])));
  }
  return out;
}

absl::StatusOr<ConvResult> Run(const ir::Workload& w, int threads, double min_seconds) {
  const ir::WorkloadSpec& s = w.spec;
  if (s.Str("layout") != "nchw") {
    return absl::UnimplementedError(
        absl::StrCat("onednn conv baseline: layout ", s.Str("layout"), " (only nchw)"));
  }
  const int64_t n = s.Int("n"), c = s.Int("c"), h = s.Int("h"), wd = s.Int("w"), k = s.Int("k"),
                r = s.Int("r"), sw = s.Int("s"), stride = s.Int("stride"), pad = s.Int("pad"),
                dil = s.Int("dilation"), g = s.Int("groups");
  const std::string epilogue = s.Str("epilogue");
  const bool has_bias = epilogue == "bias" || epilogue == "bias_relu";
  const bool has_relu = epilogue == "relu" || epilogue == "bias_relu";
  const std::vector<int64_t>& out_shape = w.output()->shape;  // n, k, oh, ow
  const int64_t oh = out_shape[2], ow = out_shape[3];

  // Logical NCHW buffers with the same random inputs the measurer uses, and the reference.
  std::vector<std::vector<float>> args = ir::AllocateArgs(w);
  ir::FillRandomInputs(args, 7);
  std::vector<std::vector<float>> ref = args;
  if (absl::Status st = ir::ComputeReference(w, ref); !st.ok()) return st;

  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);

  const dnnl::memory::dims src_dims = {n, c, h, wd}, dst_dims = {n, k, oh, ow};
  const dnnl::memory::dims wei_dims =
      g == 1 ? dnnl::memory::dims{k, c, r, sw} : dnnl::memory::dims{g, k / g, c / g, r, sw};
  const tag wei_tag = g == 1 ? tag::oihw : tag::goihw;
  dnnl::memory::desc src_any(src_dims, dt::f32, tag::any), wei_any(wei_dims, dt::f32, tag::any),
      dst_any(dst_dims, dt::f32, tag::any), bias_md({k}, dt::f32, tag::a);
  // oneDNN counts dilation from 0 (no dilation).
  const dnnl::memory::dims strides = {stride, stride}, dilates = {dil - 1, dil - 1},
                           padding = {pad, pad};
  dnnl::convolution_forward::desc desc =
      has_bias
          ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, src_any, wei_any,
                                            bias_md, dst_any, strides, dilates, padding, padding)
          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, src_any, wei_any,
                                            dst_any, strides, dilates, padding, padding);
  dnnl::primitive_attr attr;
  if (has_relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  dnnl::convolution_forward::primitive_desc pd(desc, attr, engine);
  dnnl::convolution_forward conv(pd);

  // User memories on the logical layouts, reordered once into the primitive's layouts.
  dnnl::memory user_src({src_dims, dt::f32, tag::nchw}, engine, args[0].data());
  dnnl::memory user_wei({wei_dims, dt::f32, wei_tag}, engine, args[1].data());
  dnnl::memory user_dst({dst_dims, dt::f32, tag::nchw}, engine, args.back().data());
  dnnl::memory src(pd.src_desc(), engine), wei(pd.weights_desc(), engine),
      dst(pd.dst_desc(), engine);
  dnnl::reorder(user_src, src).execute(stream, user_src, src);
  dnnl::reorder(user_wei, wei).execute(stream, user_wei, wei);
  std::unordered_map<int, dnnl::memory> exec_args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (has_bias) {
    exec_args.insert({DNNL_ARG_BIAS, dnnl::memory(bias_md, engine, args[2].data())});
  }
  stream.wait();

  std::vector<double> times = TimeRepeats(
      [&] {
        conv.execute(stream, exec_args);
        stream.wait();
      },
      min_seconds);

  dnnl::reorder(dst, user_dst).execute(stream, dst, user_dst);
  stream.wait();
  ir::CompareResult cmp;
  absl::Status check =
      ir::CheckOutput(args.back(), ref.back(), out_shape, ir::kDefaultTolerance, &cmp);
  if (!check.ok()) {
    return absl::InternalError(absl::StrCat("onednn conv of ", w.canonical, ": ", check.message()));
  }

  ConvResult result;
  result.library = "onednn-conv";
  result.impl = pd.impl_info_str();
  result.src_layout = LayoutName(pd.src_desc());
  result.runtime = RuntimeName();
  result.threads = threads;
  result.repeats = static_cast<int>(times.size());
  result.median_s = Median(times);
  result.gflops = w.flops / result.median_s * 1e-9;
  result.rel_error = cmp.rel_error;
  return result;
}

}  // namespace

absl::StatusOr<ConvResult> OnednnConv(const std::string& spec, int threads, double min_seconds) {
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
  if (!w.ok()) return w.status();
  if (w->spec.op != "conv2d") {
    return absl::InvalidArgumentError(
        absl::StrCat("onednn conv baseline: ", spec, " is not a conv2d workload"));
  }
  // oneDNN's C++ API throws dnnl::error; the status is converted here, once.
  try {
    return Run(*w, threads, min_seconds);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("onednn conv of ", w->canonical, ": ", e.what(),
                                            " (status ", static_cast<int>(e.status), ")"));
  }
}

}  // namespace lathe::baselines

#include "measure/measure_emulated.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "ir/schedule.h"
#include "measure/measure_child.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "gpuemu/verify.h"
#endif

namespace lathe::measure {

#ifdef LATHE_HAVE_CUDA_BACKEND

lathe::v1::MeasureResult MeasureEmulated(const lathe::v1::MeasureRequest& req,
                                         const ir::Workload& workload,
                                         const std::vector<std::vector<float>>& args,
                                         const std::vector<float>& reference,
                                         const ir::Trace& trace, const std::string& arch) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  auto fail = [&](lathe::v1::ErrorClass c, absl::string_view msg) {
    r.set_error_class(c);
    r.set_error_msg(std::string(msg));
    return r;
  };
  // The workload's inputs as the verifier takes them, copied once per workload.
  static std::map<std::string, std::unique_ptr<gpuemu::ReferenceData>> cache;
  auto it = cache.find(workload.canonical);
  if (it == cache.end()) {
    if (cache.size() > 8) cache.clear();
    auto d = std::make_unique<gpuemu::ReferenceData>();
    d->workload = workload;
    d->args = args;
    d->reference = reference;
    it = cache.emplace(workload.canonical, std::move(d)).first;
  }
  const gpuemu::ReferenceData& data = *it->second;

  auto sch = ir::ApplyTrace(workload, trace);
  if (!sch.ok()) return fail(lathe::v1::INVALID_SCHEDULE, sch.status().message());
  const std::string fault = TestFaultOf(req.candidate_id());
  if (fault == "crash") raise(SIGSEGV);
  if (fault == "hang") {
    for (;;) pause();
  }
  gpuemu::VerifyOptions vo;
  vo.arch = arch;
  vo.test_read_past_first_input = fault == "illegal_access";
  gpuemu::VerifyReport v = gpuemu::VerifySchedule(*sch, data, vo);
  r.set_compile_ms(v.nvrtc_ms + v.host_compile_ms);
  switch (v.outcome) {
    case gpuemu::Outcome::kOk:
      break;
    case gpuemu::Outcome::kInvalidSchedule:
    case gpuemu::Outcome::kOverLimits:
      return fail(lathe::v1::INVALID_SCHEDULE, v.message);
    case gpuemu::Outcome::kCompileError:
      return fail(lathe::v1::COMPILE_ERROR, v.message);
    case gpuemu::Outcome::kRuntimeError:
      return fail(lathe::v1::RUNTIME_ERROR, v.message);
    case gpuemu::Outcome::kWrongAnswer:
      return fail(lathe::v1::WRONG_ANSWER, v.message);
    case gpuemu::Outcome::kUnavailable:
      return fail(lathe::v1::NO_DEVICE,
                  absl::StrCat("no GPU emulator to measure on: cuda-emu:", arch, ": ", v.message));
  }
  if (fault == "wrong") {
    return fail(lathe::v1::WRONG_ANSWER, "test fault: output perturbed");
  }
  // The checked run is the first repeat; more until min_repeat_ms (at least three in all).
  double min_ms = req.min_repeat_ms() > 0 ? req.min_repeat_ms() : 100.0;
  int max_repeats = req.max_repeats() > 0 ? req.max_repeats() : 1000;
  std::vector<double> us = {v.run_ms * 1e3};
  double spent = v.run_ms;
  while (static_cast<int>(us.size()) < max_repeats && (spent < min_ms || us.size() < 3)) {
    auto ms = gpuemu::RunAgain(v);
    if (!ms.ok()) return fail(lathe::v1::RUNTIME_ERROR, ms.status().message());
    us.push_back(*ms * 1e3);
    spent += *ms;
  }
  SetTimings(us, &r);
  r.set_gflops(r.median_us() > 0 ? workload.flops / (r.median_us() * 1e-6) * 1e-9 : 0);
  r.set_error_class(lathe::v1::OK);
  return r;
}

#else  // !LATHE_HAVE_CUDA_BACKEND

lathe::v1::MeasureResult MeasureEmulated(const lathe::v1::MeasureRequest& req, const ir::Workload&,
                                         const std::vector<std::vector<float>>&,
                                         const std::vector<float>&, const ir::Trace&,
                                         const std::string& arch) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  r.set_error_class(lathe::v1::NO_DEVICE);
  r.set_error_msg(absl::StrCat("no GPU emulator to measure on: cuda-emu:", arch,
                               ": this lathe-measure was built without the CUDA backend"));
  return r;
}

#endif  // LATHE_HAVE_CUDA_BACKEND

}  // namespace lathe::measure

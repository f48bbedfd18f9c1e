#include "cost_model/database_io.h"

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::cost_model {

std::string BlobFormat() { return absl::StrCat("lathe-xgb-ubj-f", kFeatureVersion); }

absl::Status SaveToDatabase(db::Database& db, const std::string& device_class,
                            const CostModel& model) {
  absl::StatusOr<std::string> bytes = model.Save();
  if (!bytes.ok()) return bytes.status();
  db::CostModelBlob blob;
  blob.device_class = device_class;
  blob.format = BlobFormat();
  blob.model = std::move(*bytes);
  blob.trained_on = model.trained_on();
  return db.PutCostModel(blob);
}

absl::StatusOr<CostModel> LoadFromDatabase(db::Database& db, const std::string& device_class,
                                           CostModelOptions options) {
  absl::StatusOr<std::optional<db::CostModelBlob>> blob = db.GetCostModel(device_class);
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) {
    return absl::NotFoundError(
        absl::StrCat("no cost model saved for device class '", device_class, "'"));
  }
  if ((*blob)->format != BlobFormat()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model of device class '", device_class,
                                                   "' has format '", (*blob)->format,
                                                   "'; this build reads '", BlobFormat(), "'"));
  }
  absl::StatusOr<CostModel> model = CostModel::Load((*blob)->model, options);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cost model of device class '", device_class,
                                                   "': ", model.status().message()));
  }
  return model;
}

absl::StatusOr<ir::LoweredFunc> LowerTraceJson(const std::string& trace_json,
                                               const codegen::LowerOptions& recipe) {
  absl::StatusOr<ir::Trace> trace = traceio::TraceFromJson(trace_json);
  if (!trace.ok()) return trace.status();
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(trace->workload);
  if (!w.ok()) return w.status();
  absl::StatusOr<ir::Schedule> sch = ir::ApplyTrace(*w, *trace);
  if (!sch.ok()) return sch.status();
  return codegen::Lower(*sch, "kernel", recipe);
}

absl::StatusOr<ir::LoweredFunc> LowerRecordTrace(const std::string& trace_json,
                                                 const std::string& device_class) {
  absl::StatusOr<ir::TargetKind> kind = ir::DeviceClassKind(device_class);
  if (!kind.ok()) return kind.status();
  return LowerTraceJson(trace_json, codegen::LowerOptions::ForTarget(*kind));
}

absl::Status SaveFeatures(db::Database& db, const std::vector<std::string>& candidate_ids,
                          const std::vector<const FeatureMatrix*>& features) {
  if (candidate_ids.size() != features.size()) {
    return absl::InvalidArgumentError("SaveFeatures: ids and features differ in number");
  }
  std::vector<db::StoredFeatures> rows;
  rows.reserve(features.size());
  for (size_t i = 0; i < features.size(); ++i) {
    const FeatureMatrix& m = *features[i];
    db::StoredFeatures f;
    f.candidate_id = candidate_ids[i];
    f.version = kFeatureVersion;
    f.num_rows = m.num_rows;
    f.num_cols = m.num_cols;
    f.data.assign(reinterpret_cast<const char*>(m.data.data()), m.data.size() * sizeof(float));
    rows.push_back(std::move(f));
  }
  return db.PutFeatures(rows);
}

std::vector<std::optional<FeatureMatrix>> FeaturesOfRecords(db::Database& db,
                                                            const std::vector<db::Record>& records,
                                                            int64_t* lowered) {
  std::vector<std::optional<FeatureMatrix>> out(records.size());
  std::vector<std::string> ids;
  ids.reserve(records.size());
  for (const db::Record& r : records) ids.push_back(r.candidate_id);
  absl::StatusOr<std::vector<std::optional<db::StoredFeatures>>> stored = db.GetFeatures(ids);
  std::vector<std::string> fresh_ids;
  std::vector<const FeatureMatrix*> fresh;
  int64_t n_lowered = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (stored.ok() && (*stored)[i].has_value()) {
      const db::StoredFeatures& f = *(*stored)[i];
      if (f.version == kFeatureVersion && f.num_cols == kNumFeatures) {
        FeatureMatrix m;
        m.num_rows = static_cast<int>(f.num_rows);
        m.num_cols = static_cast<int>(f.num_cols);
        m.data.resize(f.data.size() / sizeof(float));
        std::memcpy(m.data.data(), f.data.data(), m.data.size() * sizeof(float));
        out[i] = std::move(m);
        continue;
      }
    }
    absl::StatusOr<ir::LoweredFunc> f =
        LowerRecordTrace(records[i].trace_json, records[i].device_class);
    absl::StatusOr<FeatureMatrix> m =
        f.ok() ? ExtractFeatures(*f) : absl::StatusOr<FeatureMatrix>(f.status());
    if (!m.ok()) continue;
    ++n_lowered;
    out[i] = std::move(*m);
    fresh_ids.push_back(records[i].candidate_id);
    fresh.push_back(&*out[i]);
  }
  // Stored for the next start; a failure to store costs only the lowering next time.
  if (!fresh.empty()) (void)SaveFeatures(db, fresh_ids, fresh);
  if (lowered != nullptr) *lowered = n_lowered;
  return out;
}

absl::StatusOr<TrainFromDatabaseStats> TrainFromDatabase(db::Database& db,
                                                         const std::string& device_class,
                                                         CostModel& model) {
  std::vector<db::Record> rows;
  absl::Status st = db.ForEachRecord([&](const db::Record& r) {
    if (r.device_class == device_class && r.error_class == db::ErrorClass::kOk && r.median_us > 0) {
      rows.push_back(r);
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  TrainFromDatabaseStats stats;
  stats.records = static_cast<int64_t>(rows.size());
  std::vector<std::optional<FeatureMatrix>> found = FeaturesOfRecords(db, rows, &stats.lowered);
  std::vector<FeatureMatrix> features;
  std::vector<double> throughputs;
  std::vector<std::string> keys;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!found[i].has_value()) {
      ++stats.skipped;
      continue;
    }
    features.push_back(std::move(*found[i]));
    throughputs.push_back(1.0 / rows[i].median_us);
    keys.push_back(rows[i].workload_key);
  }
  stats.used = static_cast<int64_t>(features.size());
  if (absl::Status u = model.Update(features, throughputs, keys); !u.ok()) return u;
  if (!model.trained() || model.trained_on() < model.num_programs()) {
    if (absl::Status t = model.Train(); !t.ok()) return t;
  }
  return stats;
}

}  // namespace lathe::cost_model

// \file
// The cost model and the tuning database: saving a device class's model as the database's
// cost-model blob, loading it back, and warm-starting a model from the measured records of a
// device class (each record's trace is replayed and lowered to get its features).
#ifndef LATHE_COST_MODEL_DATABASE_IO_H_
#define LATHE_COST_MODEL_DATABASE_IO_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/lower.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "db/database.h"
#include "ir/stmt.h"
#include "ir/target.h"

namespace lathe::cost_model {

// The blob format this build writes and reads: "lathe-xgb-ubj-f<kFeatureVersion>".
std::string BlobFormat();

// Saves (replaces) the model of `device_class`. FailedPrecondition for an untrained model;
// the database's status on a write failure.
absl::Status SaveToDatabase(db::Database& db, const std::string& device_class,
                            const CostModel& model);

// The saved model of `device_class`. NotFound when none is saved; InvalidArgument when the
// saved blob has another format (an older feature layout) or is corrupt.
absl::StatusOr<CostModel> LoadFromDatabase(db::Database& db, const std::string& device_class,
                                           CostModelOptions options = {});

// Replays a trace (JSON text) on its workload and lowers it by `recipe`.
absl::StatusOr<ir::LoweredFunc> LowerTraceJson(const std::string& trace_json,
                                               const codegen::LowerOptions& recipe);
// The program a record of `device_class` measured: its trace lowered by the recipe of the
// class's kind (codegen::LowerOptions::ForTarget of ir::DeviceClassKind).
absl::StatusOr<ir::LoweredFunc> LowerRecordTrace(const std::string& trace_json,
                                                 const std::string& device_class);

// Stores the features of measured programs under their records' candidate ids (this build's
// layout version), so that later runs train on them without lowering the traces again.
absl::Status SaveFeatures(db::Database& db, const std::vector<std::string>& candidate_ids,
                          const std::vector<const FeatureMatrix*>& features);

// The features of each record's program: the stored ones where the database has them in this
// build's layout, else the record's trace replayed, lowered and featurized (and then stored,
// so that the next start finds them); nullopt where the trace no longer replays or lowers.
// `lowered` (optional) counts the records that had to be lowered.
std::vector<std::optional<FeatureMatrix>> FeaturesOfRecords(db::Database& db,
                                                            const std::vector<db::Record>& records,
                                                            int64_t* lowered = nullptr);

struct TrainFromDatabaseStats {
  int64_t records = 0;  // ok records of the device class
  int64_t used = 0;     // of which with features (stored, or replayed, lowered, featurized)
  int64_t lowered = 0;  // of those, the ones whose features were not stored
  int64_t skipped = 0;  // traces that no longer replay or lower (logged nowhere; counted)
};

// Adds every ok record of `device_class` to `model` (throughput 1 / median latency, grouped
// by workload key; features as FeaturesOfRecords gives them) and trains it. Records whose
// trace fails to replay are skipped and counted. FailedPrecondition when too few records remain to
// train.
absl::StatusOr<TrainFromDatabaseStats> TrainFromDatabase(db::Database& db,
                                                         const std::string& device_class,
                                                         CostModel& model);

}  // namespace lathe::cost_model

#endif  // LATHE_COST_MODEL_DATABASE_IO_H_

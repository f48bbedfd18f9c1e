// lathe-measure: the sandboxed measurement child. Spawned by lathe::measure::Measurer, it
// reads framed MeasureRequests on stdin and answers MeasureResults on stdout; CPU candidates
// run JIT-compiled, cuda candidates on the GPU named by $LATHE_MEASURE_GPU (see
// measure/measure_child.h).
#include <unistd.h>

#include "measure/measure_child.h"

int main() { return lathe::measure::RunMeasureChild(STDIN_FILENO, STDOUT_FILENO); }

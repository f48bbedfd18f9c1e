/* A plain C program that loads a model library written by `lathe build --model` with dlopen
 * and runs it: lathe_model_io() names the inputs and outputs, lathe_model_run() computes.
 * Usage: run_model_so MODEL.so IN_0.bin [IN_1.bin ...] OUT_DIR
 * Each input file is raw float32 of the input's shape; output i is written to OUT_DIR/i.bin.
 * It also runs the model from two threads at once and checks that both agree with the first
 * run (the library must be thread-safe). Exit 0 on success. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*run_fn)(const float* const*, float* const*);
typedef const char* (*io_fn)(void);

static run_fn g_run;
static const float** g_in;
static long g_out_count[16];
static int g_num_out;

/* Element counts of the "shape" arrays of `section` ("inputs" or "outputs") in the JSON. */
static int counts(const char* json, const char* section, long* out, int max) {
  const char* p = strstr(json, section);
  const char* end = NULL;
  int n = 0;
  if (!p) return -1;
  end = strchr(p, ']');
  /* Each entry: ..."shape":[a,b,c]... ; the section ends at "]}" or "],\"" after the last. */
  while ((p = strstr(p, "\"shape\":[")) != NULL) {
    long c = 1;
    p += 9;
    if (strcmp(section, "\"inputs\"") == 0 && strstr(json, "\"outputs\"") < p) break;
    while (*p && *p != ']') {
      c *= strtol(p, (char**)&p, 10);
      if (*p == ',') ++p;
    }
    if (n < max) out[n++] = c;
  }
  (void)end;
  return n;
}

static void* worker(void* arg) {
  float* outs[16];
  int i;
  for (i = 0; i < g_num_out; ++i) outs[i] = malloc(sizeof(float) * g_out_count[i]);
  int rc = 0;
  for (int r = 0; r < 20 && rc == 0; ++r) rc = g_run(g_in, outs);
  float** result = (float**)arg;
  for (i = 0; i < g_num_out; ++i) result[i] = outs[i];
  return (void*)(long)rc;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.so IN.bin... OUT_DIR\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  g_run = (run_fn)dlsym(h, "lathe_model_run");
  io_fn io = (io_fn)dlsym(h, "lathe_model_io");
  if (!g_run || !io) {
    fprintf(stderr, "missing lathe_model_run or lathe_model_io\n");
    return 1;
  }
  const char* json = io();
  printf("%s\n", json);
  long in_count[16];
  int num_in = counts(json, "\"inputs\"", in_count, 16);
  g_num_out = counts(strstr(json, "\"outputs\""), "\"outputs\"", g_out_count, 16);
  if (num_in != argc - 3 || g_num_out < 1) {
    fprintf(stderr, "the model has %d inputs and %d outputs; %d input files given\n", num_in,
            g_num_out, argc - 3);
    return 1;
  }
  g_in = malloc(sizeof(float*) * num_in);
  for (int i = 0; i < num_in; ++i) {
    float* buf = malloc(sizeof(float) * in_count[i]);
    FILE* f = fopen(argv[2 + i], "rb");
    if (!f || fread(buf, sizeof(float), in_count[i], f) != (size_t)in_count[i]) {
      fprintf(stderr, "cannot read %ld floats from %s\n", in_count[i], argv[2 + i]);
      return 1;
    }
    fclose(f);
    g_in[i] = buf;
  }
  float* first[16];
  for (int i = 0; i < g_num_out; ++i) first[i] = malloc(sizeof(float) * g_out_count[i]);
  int rc = g_run(g_in, first);
  if (rc != 0) {
    fprintf(stderr, "lathe_model_run returned %d\n", rc);
    return 1;
  }
  /* Two threads at once. */
  pthread_t t[2];
  float* res[2][16];
  for (int k = 0; k < 2; ++k) pthread_create(&t[k], NULL, worker, res[k]);
  for (int k = 0; k < 2; ++k) {
    void* ret;
    pthread_join(t[k], &ret);
    if (ret != NULL) {
      fprintf(stderr, "thread %d: lathe_model_run failed\n", k);
      return 1;
    }
    for (int i = 0; i < g_num_out; ++i) {
      if (memcmp(res[k][i], first[i], sizeof(float) * g_out_count[i]) != 0) {
        fprintf(stderr, "thread %d: output %d differs from the first run\n", k, i);
        return 1;
      }
    }
  }
  for (int i = 0; i < g_num_out; ++i) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%d.bin", argv[argc - 1], i);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(first[i], sizeof(float), g_out_count[i], f) != (size_t)g_out_count[i]) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
    fclose(f);
  }
  printf("ok: %d outputs, 2 threads agree\n", g_num_out);
  return 0;
}

/* A C program on libburrow: a sandbox built, a command run with stdin, a
 * typed error, an asynchronous call answered through its callback, another
 * cancelled (its callback never runs, nothing of it lingers), and the
 * sandbox destroyed. Usage: smoke HOME IMAGE (run by tests/c_abi.rs). */
#define _DEFAULT_SOURCE /* usleep */
#include "burrow.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, BurrowResult r) {
  fprintf(stderr, "%s: %s\n", what, r.json ? r.json : "(null)");
  return 1;
}

static atomic_int answered = 0;
static char answer[4096];

static void on_result(void *context, BurrowResult result) {
  snprintf(answer, sizeof answer, "%s:%s", (const char *)context, result.json);
  burrow_result_free(result);
  burrow_object_free(result.object);
  atomic_store(&answered, 1);
}

static int wait_answer(void) {
  for (int i = 0; i < 1000 && !atomic_load(&answered); i++) usleep(10000);
  return atomic_load(&answered);
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  burrow_configure(argv[1]);
  char op[4096];
  snprintf(op, sizeof op, "{\"op\":\"build\",\"name\":\"c-smoke\",\"image\":\"%s\"}", argv[2]);
  BurrowResult r = burrow_call(NULL, op, NULL, 0);
  if (!r.object || !strstr(r.json, "\"kind\":\"sandbox\"")) return fail("build", r);
  BurrowObject *sb = r.object;
  burrow_result_free(r);

  /* "hi\n" in, base64 "aGkK" out */
  r = burrow_call(sb, "{\"op\":\"exec\",\"argv\":[\"cat\"]}", (const uint8_t *)"hi\n", 3);
  if (!strstr(r.json, "\"stdout\":\"aGkK\"") || !strstr(r.json, "\"exit_code\":0")) return fail("exec", r);
  printf("exec ok\n");
  burrow_result_free(r);

  r = burrow_call(NULL, "{\"op\":\"get\",\"name\":\"c-nobody\"}", NULL, 0);
  if (r.object || !strstr(r.json, "\"code\":\"not_found\"") || !strstr(r.json, "\"name\":\"c-nobody\"")) return fail("get", r);
  printf("not_found ok\n");
  burrow_result_free(r);

  r = burrow_call(sb, "{\"op\":", NULL, 0);
  if (!strstr(r.json, "\"code\":\"invalid_argument\"")) return fail("malformed", r);
  burrow_result_free(r);

  uint64_t call = burrow_call_async(sb, "{\"op\":\"status\"}", NULL, 0, on_result, "status");
  if (call == 0 || !wait_answer() || !strstr(answer, "status:{\"ok\":\"running\"}")) {
    fprintf(stderr, "async status: %s\n", answer);
    return 1;
  }
  printf("async ok\n");

  atomic_store(&answered, 0);
  call = burrow_call_async(sb, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"30\"]}", NULL, 0, on_result, "sleep");
  for (int i = 0; i < 500; i++) { /* until the sleep runs in the guest */
    r = burrow_call(sb, "{\"op\":\"exec\",\"argv\":[\"pidof\",\"sleep\"]}", NULL, 0);
    int running = strstr(r.json, "\"exit_code\":0") != NULL;
    burrow_result_free(r);
    if (running) break;
    usleep(10000);
  }
  if (!burrow_cancel(call)) { fprintf(stderr, "cancel: the call had ended\n"); return 1; }
  for (int i = 0; i < 1000; i++) { /* until it is gone from the guest */
    r = burrow_call(sb, "{\"op\":\"exec\",\"argv\":[\"pidof\",\"sleep\"]}", NULL, 0);
    int running = strstr(r.json, "\"exit_code\":0") != NULL;
    burrow_result_free(r);
    if (!running) break;
    if (i == 999) { fprintf(stderr, "the cancelled sleep still runs\n"); return 1; }
    usleep(10000);
  }
  usleep(200000);
  if (atomic_load(&answered)) { fprintf(stderr, "a cancelled call called back: %s\n", answer); return 1; }
  if (burrow_cancel(call)) { fprintf(stderr, "cancelled twice\n"); return 1; }
  printf("cancel ok\n");

  char *codes = burrow_error_codes();
  if (!strstr(codes, "\"sandbox_replaced\"")) { fprintf(stderr, "codes: %s\n", codes); return 1; }
  burrow_string_free(codes);

  r = burrow_call(sb, "{\"op\":\"destroy\"}", NULL, 0);
  if (strcmp(r.json, "{\"ok\":null}") != 0) return fail("destroy", r);
  burrow_result_free(r);
  burrow_object_free(sb);
  printf("done\n");
  return 0;
}

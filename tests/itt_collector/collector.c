/* A minimal ITT collector, for tests: what VTune's collector library receives from a program that
 * emits ITT tasks, written to a text file instead of a VTune result.
 *
 * A program that uses the ITT API (libtorch does, for torch.profiler.itt) loads the library named by
 * INTEL_LIBITTNOTIFY64 the first time it calls the API. This one exports `__itt_api_version` (so the
 * loader resolves the API's functions by name) and the four functions torch's ITT ranges use. The loader
 * resolves only the API groups named in INTEL_ITTNOTIFY_GROUPS: run with INTEL_ITTNOTIFY_GROUPS=structure
 * (tasks, domains and string handles). Each task
 * begin and end is logged to the file named by PINCHPOINT_ITT_LOG as
 *     B <thread id> <CLOCK_MONOTONIC ns> <task name>
 *     E <thread id> <CLOCK_MONOTONIC ns>
 * The structs follow the layout of ittnotify.h (public, BSD-licensed API). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct itt_domain {
    volatile int flags;
    const char *nameA;
    void *nameW;
    int extra1;
    void *extra2;
    struct itt_domain *next;
} itt_domain;

typedef struct itt_string_handle {
    const char *strA;
    void *strW;
    int extra1;
    void *extra2;
    struct itt_string_handle *next;
} itt_string_handle;

typedef struct itt_id {
    unsigned long long d1, d2, d3;
} itt_id;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static itt_string_handle *handles;

static FILE *log_file(void) {
    if (out == NULL) {
        const char *path = getenv("PINCHPOINT_ITT_LOG");
        out = fopen(path ? path : "/dev/null", "a");
    }
    return out;
}

static unsigned long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

const char *__itt_api_version(void) { return "pinchpoint-test-collector"; }

itt_domain *__itt_domain_create(const char *name) {
    itt_domain *d = calloc(1, sizeof *d);
    d->flags = 1; /* enabled: the API only calls task_begin on a domain whose flags are set */
    d->nameA = strdup(name ? name : "");
    return d;
}

itt_string_handle *__itt_string_handle_create(const char *name) {
    pthread_mutex_lock(&lock);
    itt_string_handle *h = handles;
    while (h != NULL && strcmp(h->strA, name) != 0) h = h->next;
    if (h == NULL) {
        h = calloc(1, sizeof *h);
        h->strA = strdup(name ? name : "");
        h->next = handles;
        handles = h;
    }
    pthread_mutex_unlock(&lock);
    return h;
}

void __itt_task_begin(const itt_domain *domain, itt_id id, itt_id parent, itt_string_handle *name) {
    (void)domain; (void)id; (void)parent;
    pthread_mutex_lock(&lock);
    FILE *f = log_file();
    if (f) {
        fprintf(f, "B %ld %llu %s\n", (long)syscall(SYS_gettid), now_ns(), name ? name->strA : "");
        fflush(f);
    }
    pthread_mutex_unlock(&lock);
}

void __itt_task_end(const itt_domain *domain) {
    (void)domain;
    pthread_mutex_lock(&lock);
    FILE *f = log_file();
    if (f) {
        fprintf(f, "E %ld %llu\n", (long)syscall(SYS_gettid), now_ns());
        fflush(f);
    }
    pthread_mutex_unlock(&lock);
}

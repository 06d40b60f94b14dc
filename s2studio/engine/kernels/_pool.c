/* The GEMV's own worker threads (built as part of _qdot.c; POSIX only: elsewhere S2P_POOL is 0
 * and the numba prange schedules of intdot.py run).
 *
 * Why not the OpenMP pool numba's prange runs on: with OMP_WAIT_POLICY=PASSIVE (s2studio/__init__.py:
 * spinning OpenMP workers made a busy desktop 2.6x slower) each parallel region sleeps twice -
 * the worker until the region starts, and the calling thread at the closing barrier until the
 * worker arrives - and on this VM every such wake-up costs ~30-100 us, a fixed ~60-100 us per
 * GEMV over ~500 GEMVs a frame (docs/performance.md, "Why w2 and wo run furthest from their
 * floor"). Here:
 * - the caller never sleeps: it publishes the job, starts on the tasks at once (rows claimed
 *   from a shared counter, as s2q_gemv_tasks does), and at the end waits only for workers that
 *   joined and are inside one small task (microseconds); a worker that is slow to wake or is
 *   descheduled simply finds fewer tasks or none;
 * - a worker spins for a short while (``spin_us``, ~the gaps between a frame's GEMVs) after its
 *   last job, then sleeps on a condition variable; while spinning it calls sched_yield every few
 *   microseconds; on a busy machine it does not spin but sleeps right after each job: when the
 *   machine has more threads runnable than cores (Linux's /proc/loadavg, read every 2 ms, two
 *   reads in a row), or for 20 ms after a yield that took long (another thread ran on its
 *   core). Measured on the 2-core VM: quietly a 100 us spin made a frame 1.0-1.15x faster than
 *   sleeping at once (four runs); beside one CPU-bound process, before the busy check, sleeping
 *   at once was 1.2x faster than spinning (the scheduler charges the spinner its spin and then
 *   runs the competitor, on its core or the caller's, when a GEMV comes); with the check the
 *   two are alike there (docs/performance.md, "The GEMV's own threads").
 * Results do not depend on who computes a row, so outputs are bit-identical to the other
 * schedules.
 *
 * State word: generation (upper 32 bits) | CLOSED (bit 31) | joiners (lower 31 bits). A worker
 * joins the current generation with a compare-and-swap that fails once the caller has closed
 * it, so a late worker never starts on a finished job, and the job's arguments stay valid
 * while anyone has joined. One job at a time: a second thread calling while a job runs (two
 * engines at once) computes its GEMV alone, without waiting. */

#if !defined(_WIN32) && !defined(S2Q_NO_POOL)
#define S2P_POOL 1
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#define S2P_MAX_WORKERS 255
#define S2P_CLOSED ((uint64_t)1 << 31)
#define S2P_JOINERS ((uint64_t)0x7fffffff)

typedef void (*s2p_fn)(const int64_t *args, int64_t *next); /* a "tasks" function: claims from *next */

static struct {
    pthread_mutex_t lock;      /* sleepers wait on wake under it; also guards (re)starting */
    pthread_cond_t wake;
    pthread_mutex_t publish;   /* held by the one caller whose job is out (trylock) */
    uint64_t state;            /* see above; __atomic_* only */
    int sleepers;              /* workers in (or entering) cond_wait; under lock + atomics */
    int quit;                  /* workers of the old size leave; under lock */
    int running;               /* workers started */
    int64_t spin_ns;           /* how long an idle worker spins before it sleeps */
    s2p_fn fn;                 /* the job: written before the state's release store */
    int64_t args[16];
    int64_t next;              /* the job's task counter */
    pthread_t threads[S2P_MAX_WORKERS];
    int64_t jobs, joined;      /* statistics: jobs published, worker joins, */
    int64_t busy_naps;         /* and sleeps without a spin because the machine was busy */
} s2p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0,
         100000, 0, {0}, 0, {0}, 0, 0, 0};

static int s2p_wanted = 1; /* threads in all, the caller included (set_threads) */

S2Q_INLINE void s2p_relax(void) {
#if defined(S2Q_X86)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t s2p_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Another thread took the core during a yield this long (ns): the machine is busy. */
#define S2P_BUSY_YIELD_NS 30000
/* After that, a worker sleeps at once after each job for this long (ns), then tries spinning again. */
#define S2P_BUSY_BACKOFF_NS 20000000
/* How often (ns) a worker about to spin reads how many threads the machine has runnable. */
#define S2P_LOAD_CHECK_NS 2000000

/* Whether more threads are runnable on the machine than it has cores (Linux: /proc/loadavg's
 * "running/total" field, ~1.5 us a read, done at most every 2 ms): then a spinning worker takes
 * a core another program's thread - or our own caller, preempted by it - needs. Elsewhere: no. */
static int s2p_load_fd = -2; /* -2: not opened yet, -1: none here */
static int s2p_cores = 0;
static int64_t s2p_load_checked = 0;
static int s2p_load_busy = 0;

static int s2p_machine_busy(int64_t now) {
    if (now - __atomic_load_n(&s2p_load_checked, __ATOMIC_RELAXED) < S2P_LOAD_CHECK_NS)
        return __atomic_load_n(&s2p_load_busy, __ATOMIC_RELAXED);
    __atomic_store_n(&s2p_load_checked, now, __ATOMIC_RELAXED);
    if (s2p_load_fd == -2) {
        s2p_load_fd = open("/proc/loadavg", O_RDONLY);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        s2p_cores = n > 0 ? (int)n : 1;
    }
    if (s2p_load_fd < 0) return 0;
    char buf[128];
    ssize_t got = pread(s2p_load_fd, buf, sizeof buf - 1, 0);
    if (got <= 0) return 0;
    buf[got] = 0;
    /* "0.50 0.33 0.13 3/215 12345": the number before the slash */
    char *slash = strchr(buf, '/');
    if (!slash) return 0;
    char *p = slash;
    while (p > buf && p[-1] >= '0' && p[-1] <= '9') p--;
    int running = 0;
    for (; p < slash; p++) running = running * 10 + (*p - '0');
    /* two reads in a row (2 ms apart): a kernel thread or a short-lived process that happened
     * to be runnable at one read does not stop the spin (it did ~20 % of the time on a quiet VM) */
    static int over_before = 0;
    int over = running > s2p_cores;
    int busy = over && over_before;
    over_before = over;
    __atomic_store_n(&s2p_load_busy, busy, __ATOMIC_RELAXED);
    return busy;
}

/* Spin (yielding every few us) until the generation differs from ``gen``, ``spin_ns`` pass, or a
 * yield shows that another thread wanted this core (then *busy_until is set); not at all while
 * the machine is busy (see the top of this file). */
static uint64_t s2p_spin_for_job(uint32_t gen, int64_t spin_ns, int64_t *busy_until) {
    uint64_t w = __atomic_load_n(&s2p.state, __ATOMIC_ACQUIRE);
    if ((uint32_t)(w >> 32) != gen || spin_ns <= 0) return w;
    int64_t start = s2p_now_ns(), last_yield = start;
    if (start < *busy_until || s2p_machine_busy(start)) {
        __atomic_add_fetch(&s2p.busy_naps, 1, __ATOMIC_RELAXED);
        return w;
    }
    for (;;) {
        for (int i = 0; i < 32; i++) {
            s2p_relax();
            w = __atomic_load_n(&s2p.state, __ATOMIC_ACQUIRE);
            if ((uint32_t)(w >> 32) != gen) return w;
        }
        int64_t now = s2p_now_ns();
        if (now - start >= spin_ns) return w;
        if (now - last_yield >= 4000) {
            sched_yield();
            last_yield = s2p_now_ns();
            if (last_yield - now > S2P_BUSY_YIELD_NS) {
                *busy_until = last_yield + S2P_BUSY_BACKOFF_NS;
                return __atomic_load_n(&s2p.state, __ATOMIC_ACQUIRE);
            }
        }
    }
}

static void *s2p_worker(void *unused) {
    (void)unused;
#if defined(__APPLE__)
    pthread_setname_np("s2studio-gemv"); /* (Linux: named by its creator, s2p_ensure_workers) */
#endif
    uint32_t seen = (uint32_t)(__atomic_load_n(&s2p.state, __ATOMIC_ACQUIRE) >> 32);
    int64_t busy_until = 0;
    for (;;) {
        uint64_t w = s2p_spin_for_job(seen, __atomic_load_n(&s2p.spin_ns, __ATOMIC_RELAXED), &busy_until);
        if ((uint32_t)(w >> 32) == seen) { /* nothing came while spinning: sleep */
            pthread_mutex_lock(&s2p.lock);
            __atomic_add_fetch(&s2p.sleepers, 1, __ATOMIC_SEQ_CST);
            while (!s2p.quit && (uint32_t)(__atomic_load_n(&s2p.state, __ATOMIC_SEQ_CST) >> 32) == seen)
                pthread_cond_wait(&s2p.wake, &s2p.lock);
            __atomic_sub_fetch(&s2p.sleepers, 1, __ATOMIC_SEQ_CST);
            int leave = s2p.quit;
            pthread_mutex_unlock(&s2p.lock);
            if (leave) return NULL;
            continue;
        }
        seen = (uint32_t)(w >> 32);
        /* join this generation unless it is closed (then wait for the next one) */
        while (!(w & S2P_CLOSED) && (uint32_t)(w >> 32) == seen) {
            if (__atomic_compare_exchange_n(&s2p.state, &w, w + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
                s2p.fn(s2p.args, &s2p.next);
                __atomic_add_fetch(&s2p.joined, 1, __ATOMIC_RELAXED);
                __atomic_sub_fetch(&s2p.state, 1, __ATOMIC_RELEASE);
                break;
            }
        }
    }
}

static void s2p_stop_workers(void) {
    pthread_mutex_lock(&s2p.lock);
    s2p.quit = 1;
    pthread_cond_broadcast(&s2p.wake);
    pthread_mutex_unlock(&s2p.lock);
    for (int i = 0; i < s2p.running; i++) pthread_join(s2p.threads[i], NULL);
    s2p.running = 0;
    s2p.quit = 0;
}

/* Start or stop workers so that ``s2p_wanted - 1`` run; called by the publishing caller only.
 * Workers block every signal (they inherit the mask they are created with), so a Ctrl+C or a
 * SIGTERM always reaches a thread that Python's handlers run on. */
static void s2p_ensure_workers(void) {
    int want = __atomic_load_n(&s2p_wanted, __ATOMIC_RELAXED) - 1;
    if (want > S2P_MAX_WORKERS) want = S2P_MAX_WORKERS;
    if (want == s2p.running) return;
    if (s2p.running) s2p_stop_workers();
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    for (int i = 0; i < want; i++) {
        if (pthread_create(&s2p.threads[i], NULL, s2p_worker, NULL) != 0) break; /* fewer then */
#if defined(__linux__)
        pthread_setname_np(s2p.threads[i], "s2studio-gemv"); /* as top -H and debuggers show it */
#endif
        s2p.running = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
}

/* A forked child has none of the parent's threads: start afresh there. */
static void s2p_after_fork_child(void) {
    pthread_mutex_init(&s2p.lock, NULL);
    pthread_cond_init(&s2p.wake, NULL);
    pthread_mutex_init(&s2p.publish, NULL);
    s2p.running = 0;
    s2p.sleepers = 0;
    s2p.quit = 0;
    __atomic_store_n(&s2p.state, 0, __ATOMIC_RELAXED);
}

/* Run fn(args, counter) on the caller and the workers; each call of fn claims tasks from the
 * counter until none is left. Alone (one thread, no workers, or another caller's job out): the
 * caller runs fn with a counter of its own. */
static void s2p_run(s2p_fn fn, const int64_t *args, int nargs) {
    int64_t own_next = 0;
    if (pthread_mutex_trylock(&s2p.publish) != 0) { fn(args, &own_next); return; }
    s2p_ensure_workers(); /* also stops them all when the count went down to 1 */
    if (s2p.running == 0) { pthread_mutex_unlock(&s2p.publish); fn(args, &own_next); return; }
    s2p.fn = fn;
    memcpy(s2p.args, args, (size_t)nargs * sizeof(int64_t));
    s2p.next = 0;
    uint64_t w = __atomic_load_n(&s2p.state, __ATOMIC_RELAXED);
    uint64_t gen = ((w >> 32) + 1) & 0xffffffffu;
    __atomic_store_n(&s2p.state, gen << 32, __ATOMIC_SEQ_CST); /* open, nobody joined */
    s2p.jobs++;
    if (__atomic_load_n(&s2p.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&s2p.lock);
        pthread_cond_broadcast(&s2p.wake);
        pthread_mutex_unlock(&s2p.lock);
    }
    fn(s2p.args, &s2p.next);
    /* close: no one joins from now on; wait for those inside (each in its last small task) */
    w = __atomic_or_fetch(&s2p.state, S2P_CLOSED, __ATOMIC_ACQ_REL);
    if (w & S2P_JOINERS) {
        int64_t start = s2p_now_ns();
        for (int n = 0; __atomic_load_n(&s2p.state, __ATOMIC_ACQUIRE) & S2P_JOINERS; n++) {
            s2p_relax();
            /* a joiner the OS descheduled: let it have this core */
            if ((n & 255) == 255 && s2p_now_ns() - start > 20000) sched_yield();
        }
    }
    pthread_mutex_unlock(&s2p.publish);
}

static void s2p_init_once(void) {
    pthread_atfork(NULL, NULL, s2p_after_fork_child);
}

/* The GEMV job: args = s2q_gemv_tasks' first 12 arguments. */
static void s2p_gemv_job(const int64_t *a, int64_t *next) {
    s2q_gemv_tasks(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                   (int64_t)(intptr_t)next);
}

/* s2q_gemv_tasks over the pool (numba calls this from intdot's serial wrappers). */
void s2q_pool_gemv(int64_t type, int64_t raw, int64_t row_bytes, int64_t rows, int64_t task_rows,
                   int64_t xq, int64_t xd, int64_t xbs, int64_t m, int64_t cols, int64_t out,
                   int64_t out_stride) {
    int64_t args[12] = {type, raw, row_bytes, rows, task_rows, xq, xd, xbs, m, cols, out, out_stride};
    s2p_run(s2p_gemv_job, args, 12);
}
#else
#define S2P_POOL 0
#endif

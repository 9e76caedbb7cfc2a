/*
 * A stand-in for the NVIDIA driver's user-space libraries, for testing the isolation probe on a machine
 * without a GPU: built twice, as libnvidia-ml.so.1 (NVML) and libcuda.so.1 (the CUDA driver API), with
 * the few symbols the probe calls and their real signatures and return codes.  Nothing is computed; GPU
 * memory is an account, kept in a file so that several processes can share one "GPU":
 *
 *   FAKE_GPU_POOL=DIR           the memory account (a file per process, counted while it lives); processes
 *                               naming the same DIR share the memory (time-slicing); one each isolates (MIG)
 *   FAKE_GPU_CAPACITY_MIB=N     what the account may hold (default 1024)
 *   FAKE_GPU_PROCESS_CAP_MIB=N  a per-process cap on top (a software cap, as HAMi enforces); 0: none
 *   FAKE_GPU_FAULT_FILE=FILE    while FILE exists, memsets and synchronizes fail with
 *                               CUDA_ERROR_ECC_UNCORRECTABLE (214): an Xid on this GPU
 *   FAKE_GPU_MINOR=N            the NVML minor number (default 0)
 *   FAKE_GPU_MIG_INSTANCE=N     NVML shows MIG mode on, with one MIG device of GPU instance N
 *   FAKE_NVML_FAIL=1            nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED (9)
 *
 * A process's memory returns to the account when it exits, however it exits, as the driver frees a dead
 * process's memory.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef unsigned long long u64;

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    return v && *v ? atol(v) : fallback;
}

/* ----------------------------------------------------------------------------------------- NVML */

typedef struct { u64 total, free, used; } nvmlMemory_t;
static int gpu_handle, mig_handle;

int nvmlInit_v2(void) { return env_long("FAKE_NVML_FAIL", 0) ? 9 : 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int rc) {
    switch (rc) {
    case 0: return "Success";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}
int nvmlDeviceGetCount_v2(unsigned *count) { *count = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
    if (i != 0) return 2;
    *h = &gpu_handle;
    return 0;
}
int nvmlDeviceGetName(void *h, char *buf, unsigned len) {
    snprintf(buf, len, "%s", h == &mig_handle ? "NVIDIA H200 MIG 1g.18gb" : "NVIDIA H200");
    return 0;
}
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
    if (h == &mig_handle)
        snprintf(buf, len, "MIG-fake-%ld", env_long("FAKE_GPU_MIG_INSTANCE", 0));
    else
        snprintf(buf, len, "GPU-fake-%ld", env_long("FAKE_GPU_MINOR", 0));
    return 0;
}
int nvmlDeviceGetMinorNumber(void *h, unsigned *minor) {
    if (h != &gpu_handle) return 3; /* NVML_ERROR_NOT_SUPPORTED on MIG devices */
    *minor = (unsigned)env_long("FAKE_GPU_MINOR", 0);
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    long mib = env_long("FAKE_GPU_CAPACITY_MIB", 1024);
    m->total = (u64)mib << 20;
    m->used = 0;
    m->free = m->total;
    (void)h;
    return 0;
}
int nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending) {
    (void)h;
    *current = *pending = getenv("FAKE_GPU_MIG_INSTANCE") ? 1 : 0;
    return 0;
}
int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count) { (void)h; *count = 7; return 0; }
int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned i, void **mig) {
    (void)h;
    if (!getenv("FAKE_GPU_MIG_INSTANCE") || i != 0) return 6; /* NVML_ERROR_NOT_FOUND */
    *mig = &mig_handle;
    return 0;
}
int nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
    if (h != &mig_handle) return 3;
    *id = (unsigned)env_long("FAKE_GPU_MIG_INSTANCE", 0);
    return 0;
}
int nvmlDeviceGetComputeInstanceId(void *h, unsigned *id) {
    if (h != &mig_handle) return 3;
    *id = 0;
    return 0;
}

/* ----------------------------------------------------------------------------------- CUDA driver */

#define MAX_ALLOCS 4096
static u64 sizes[MAX_ALLOCS]; /* by pointer - 1; 0 = free */
static u64 mine;              /* MiB this process holds */
static int initialised;

static int faulted(void) {
    const char *f = getenv("FAKE_GPU_FAULT_FILE");
    return f && access(f, F_OK) == 0;
}

/* Add delta MiB to this process's share of the account; 0, or 2 (CUDA_ERROR_OUT_OF_MEMORY) when it does not
 * fit.  The account is a directory: one file per process holding its MiB, counted only while that process
 * lives, so a killed process's memory comes back as the driver frees it. */
static int account(long delta) {
    const char *dir = getenv("FAKE_GPU_POOL");
    long capacity = env_long("FAKE_GPU_CAPACITY_MIB", 1024), used = 0, own = (long)mine;
    char path[4096], buf[64];
    int lock, fd, rc = 0;
    DIR *d;
    struct dirent *e;
    if (!dir) return 999;
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/lock", dir);
    lock = open(path, O_RDWR | O_CREAT, 0600);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) return 999;
    d = opendir(dir);
    while (d && (e = readdir(d)) != NULL) {
        long pid = atol(e->d_name);
        if (pid <= 0 || pid == (long)getpid()) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (kill((pid_t)pid, 0) != 0) { unlink(path); continue; } /* gone: the driver took it back */
        fd = open(path, O_RDONLY);
        memset(buf, 0, sizeof buf);
        if (fd >= 0) { if (read(fd, buf, sizeof buf - 1) > 0) used += atol(buf); close(fd); }
    }
    if (d) closedir(d);
    if (delta > 0 && used + own + delta > capacity) {
        rc = 2;
    } else {
        own += delta;
        if (own < 0) own = 0;
        snprintf(path, sizeof path, "%s/%ld", dir, (long)getpid());
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        snprintf(buf, sizeof buf, "%ld\n", own);
        if (fd < 0 || write(fd, buf, strlen(buf)) < 0) rc = 999;
        if (fd >= 0) close(fd);
    }
    flock(lock, LOCK_UN);
    close(lock);
    return rc;
}

__attribute__((destructor)) static void release(void) {
    if (mine) account(-(long)mine);
}

int cuInit(unsigned flags) {
    (void)flags;
    if (!getenv("FAKE_GPU_POOL")) return 100; /* CUDA_ERROR_NO_DEVICE */
    initialised = 1;
    return 0;
}
int cuDeviceGet(int *device, int ordinal) {
    if (!initialised) return 3;
    if (ordinal != 0) return 101;
    *device = 0;
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int device) { (void)device; *ctx = &mine; return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
int cuGetErrorName(int rc, const char **name) {
    switch (rc) {
    case 0: *name = "CUDA_SUCCESS"; return 0;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 214: *name = "CUDA_ERROR_ECC_UNCORRECTABLE"; return 0;
    default: *name = 0; return 1;
    }
}
int cuMemAlloc_v2(u64 *pointer, size_t bytes) {
    long mib = (long)(bytes >> 20), cap = env_long("FAKE_GPU_PROCESS_CAP_MIB", 0);
    int i, rc;
    if (faulted()) return 214;
    if (cap && (long)mine + mib > cap) return 2;
    for (i = 0; i < MAX_ALLOCS && sizes[i]; i++) {}
    if (i == MAX_ALLOCS) return 2;
    rc = account(mib);
    if (rc) return rc;
    sizes[i] = (u64)mib;
    mine += (u64)mib;
    *pointer = (u64)(i + 1);
    return 0;
}
int cuMemFree_v2(u64 pointer) {
    if (pointer < 1 || pointer > MAX_ALLOCS || !sizes[pointer - 1]) return 1; /* CUDA_ERROR_INVALID_VALUE */
    account(-(long)sizes[pointer - 1]);
    mine -= sizes[pointer - 1];
    sizes[pointer - 1] = 0;
    return 0;
}
int cuMemsetD8_v2(u64 pointer, unsigned char value, size_t bytes) {
    (void)value;
    if (faulted()) return 214;
    if (pointer < 1 || pointer > MAX_ALLOCS || (sizes[pointer - 1] << 20) < bytes) return 1;
    return 0;
}
int cuCtxSynchronize(void) { return faulted() ? 214 : 0; }

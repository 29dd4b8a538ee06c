/*
 * iomatrix_insns: a QEMU TCG plugin that counts the guest instructions each vCPU executes, in
 * the kernel and in user space, into a file the host reads while the guest runs.
 *
 * Why: under TCG on a shared host, time-based metrics (IOPS, latency) vary by 20-40% from one
 * repetition to the next; the instructions a kernel path executes per I/O do not depend on how
 * busy the host is. The host reads the file when the guest agent says a workload starts and
 * ends (host/vm/insns.py), so the count is the host's, never the guest's word.
 *
 * What it counts: every translated block's instructions, each time the block starts executing,
 * as kernel instructions when the block's virtual address is in the upper half of the x86-64
 * address space (>= 0xffff800000000000, where Linux maps itself), else as user instructions. A
 * block left early by an exception is counted whole (rare on the I/O path, and the same on both
 * sides of a comparison). An idle vCPU executes nothing (hlt stops it), so idle time costs no
 * instructions: the count cannot see waits (device latency, sleeps), only work.
 *
 * The file (argument out=PATH, made by the plugin, never reused):
 *   bytes 0-7   "IOMXINS1"
 *   bytes 8-11  number of vCPUs (little-endian u32), 12-15 zero
 *   then per vCPU a 64-byte slot: u64 kernel instructions, u64 user instructions, padding
 *   (one cache line each, so vCPU threads under MTTCG never share a line).
 * Counters only grow; each is an aligned 64-bit store, which x86-64 never tears.
 *
 * Built by the host against the plugin API header of the installed QEMU's own source package
 * (host/vm/insn_plugin.py); needs nothing but that header and libc.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define HEADER_BYTES 16
#define SLOT_BYTES 64
#define KERNEL_START 0xffff800000000000ULL

static uint64_t *slots;   /* the mapped file, from the first slot */
static int n_vcpus;

/* One vCPU: the translated block's count and mode are packed in its userdata (count << 1 | kernel). */
static void tb_exec(unsigned int vcpu_index, void *udata)
{
    uintptr_t packed = (uintptr_t)udata;
    if ((int)vcpu_index >= n_vcpus) {
        return;
    }
    slots[vcpu_index * (SLOT_BYTES / 8) + ((packed & 1) ? 0 : 1)] += packed >> 1;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    uint64_t n = qemu_plugin_tb_n_insns(tb);
    int kernel = qemu_plugin_tb_vaddr(tb) >= KERNEL_START;
    if (n_vcpus == 1) {
        /* One vCPU: an inline add, no call into the plugin (about half the cost). */
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                                 &slots[kernel ? 0 : 1], n);
        return;
    }
    /* Several vCPUs run on their own threads (MTTCG): an inline add to one counter would race,
     * a call knows its vCPU and adds to that vCPU's own slot. */
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS,
                                         (void *)(uintptr_t)((n << 1) | (uint64_t)kernel));
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            path = argv[i] + 4;
        }
    }
    if (path == NULL || !info->system_emulation || strcmp(info->target_name, "x86_64") != 0) {
        fprintf(stderr, "iomatrix_insns: needs out=PATH and an x86_64 system guest (got %s)\n", info->target_name);
        return -1;
    }
    n_vcpus = info->system.max_vcpus;
    if (n_vcpus < 1 || n_vcpus > 4096) {
        fprintf(stderr, "iomatrix_insns: %d vCPUs\n", n_vcpus);
        return -1;
    }
    size_t size = HEADER_BYTES + (size_t)n_vcpus * SLOT_BYTES;
    /* A new file only: never write through a name someone else made. */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("iomatrix_insns: cannot create the counters file");
        return -1;
    }
    unsigned char *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        perror("iomatrix_insns: cannot map the counters file");
        return -1;
    }
    uint32_t count = (uint32_t)n_vcpus;
    memcpy(map + 8, &count, sizeof count);
    memcpy(map, "IOMXINS1", 8);
    slots = (uint64_t *)(map + HEADER_BYTES);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    return 0;
}

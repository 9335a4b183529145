// SPDX-License-Identifier: GPL-2.0
/*
 * pci_test: aigpu on a PCI function, as clients that know nothing of aigpu see it
 * (docs/kmd.md, "Attachments"). Linked statically against Debian's libdrm (libdrm.a, the same
 * library as drmdevice's).
 *
 *   pci_test BDF [JOBS]      BDF: the function aigpu is bound to (0000:00:04.0)
 *
 * - libdrm's drmGetDevices2 lists a PCI device at BDF with ids 1234:11e8 and a render node;
 * - drmGetDevice2 on that render node succeeds with the same bus address and ids, and
 *   drmGetVersion names the driver `aigpu`;
 * - JOBS (default 16) jobs, submitted and waited for one at a time on that node, each complete,
 *   the device's debugfs `jobs` count grows by JOBS, and the function's MSI line in
 *   /proc/interrupts (`PCI-MSI-<BDF> ... aigpu`) grows, by at least as much as the top half's
 *   count (debugfs `irqs`): every top half ran from the MSI. Not one MSI per job: a WAIT can
 *   return on the fence before the interrupt is taken, and a job that completes while the line
 *   is still high adds no edge (12 MSIs for 16 jobs were seen), as on hardware.
 * With PCI_TEST_IRQ=intx in the environment (a guest booted with `pci=nomsi`: aigpu falls back to
 * the function's INTx line) the line counted is the function's IO-APIC line naming aigpu instead,
 * and it must not be an MSI; the checks are the same.
 * Prints `pci_test: ok NAME` / `pci_test: FAIL NAME: why` and `pci_test: N passed, M failed`.
 */
#define GUEST_TEST "pci_test"
#include "guest_check.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <xf86drm.h>

#include "aigpu_drm.h"

#define EDU_VENDOR 0x1234
#define EDU_DEVICE 0x11e8

static char bdf[32];
/* The interrupt aigpu uses on the function: its MSI, or (PCI_TEST_IRQ=intx) its INTx line. */
static int intx;

/* Whether `d` is a PCI device at `bdf`. */
static int at_bdf(const drmDevicePtr d)
{
	char s[32];

	if (d->bustype != DRM_BUS_PCI)
		return 0;
	snprintf(s, sizeof(s), "%04x:%02x:%02x.%u", d->businfo.pci->domain, d->businfo.pci->bus,
		 d->businfo.pci->dev, d->businfo.pci->func);
	return !strcmp(s, bdf);
}

/* The interrupt count of the function: the sum of the per-CPU columns of its /proc/interrupts
 * line (`PCI-MSI-<bdf>`, or `IO-APIC` for INTx, and the handler name `aigpu`); -1 if there is no
 * such line. */
static long long msi_count(void)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[1024], want[64];
	long long n = -1;

	if (!f)
		return -1;
	if (intx)
		snprintf(want, sizeof(want), "IO-APIC");
	else
		snprintf(want, sizeof(want), "PCI-MSI-%s", bdf);
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, want) || strstr(line, intx ? "MSI" : "IO-APIC") || !strstr(line, " aigpu"))
			continue;
		char *p = strchr(line, ':');
		if (!p)
			break;
		n = 0;
		for (p++;;) {
			char *e;
			long long v = strtoll(p, &e, 10);
			if (e == p)
				break;
			n += v;
			p = e;
		}
		break;
	}
	fclose(f);
	return n;
}

/* `key=<n>` of /sys/kernel/debug/dri/<minor>/status; -1 if absent. */
static long long status_field(unsigned minor, const char *key)
{
	char path[64], buf[1024], want[32];
	long long v = -1;

	snprintf(path, sizeof(path), "/sys/kernel/debug/dri/%u/status", minor);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	snprintf(want, sizeof(want), " %s=", key);
	char *p = strstr(buf, want);
	if (p)
		v = strtoll(p + strlen(want), NULL, 10);
	return v;
}

static int xioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) == -1 ? -errno : 0;
}

/* `jobs` one-packet FILL jobs on `fd`, each waited for (5 s) before the next: 0 or the first
 * failing step's -errno (`what` names it). */
static int run_jobs(int fd, unsigned jobs, const char **what)
{
	const uint64_t va = 0x40000000ull, size = 64 * 1024;
	struct drm_aigpu_gem_create c = { .size = size };
	int r;

	*what = "gem create";
	if ((r = xioctl(fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c)))
		return r;
	struct drm_aigpu_vm_bind b = { .handle = c.handle, .va = va, .size = size,
				       .access = AIGPU_VM_ACCESS_READ | AIGPU_VM_ACCESS_WRITE };
	*what = "vm bind";
	if ((r = xioctl(fd, DRM_IOCTL_AIGPU_VM_BIND, &b)))
		return r;
	struct drm_aigpu_gem_mmap_offset m = { .handle = c.handle };
	*what = "mmap offset";
	if ((r = xioctl(fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m)))
		return r;
	uint32_t *cmd = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)m.offset);
	*what = "mmap";
	if (cmd == MAP_FAILED)
		return -errno;
	/* FILL (docs/hw-spec.md section 6): opcode 0x02, 6 words: dst, size, pattern; the packet
	 * sits at offset 0, the data it fills at offset 4096. */
	const uint64_t dst = va + 4096;
	uint32_t pkt[6] = { 0x02u | (6u << 16), (uint32_t)dst, (uint32_t)(dst >> 32), 64, 0, 0x5a5a5a5au };
	memcpy(cmd, pkt, sizeof(pkt));
	struct drm_aigpu_ctx_create cc = { .priority = AIGPU_PRIORITY_NORMAL };
	*what = "ctx create";
	if ((r = xioctl(fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc)))
		goto out;
	for (unsigned i = 0; i < jobs; i++) {
		struct drm_aigpu_cmdbuf cb = { .va = va, .size = sizeof(pkt) };
		struct drm_aigpu_submit s = { .ctx_id = cc.ctx_id, .cmdbufs = (uintptr_t)&cb, .num_cmdbufs = 1 };
		*what = "submit";
		if ((r = xioctl(fd, DRM_IOCTL_AIGPU_SUBMIT, &s)))
			goto out;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		struct drm_aigpu_wait w = { .ctx_id = cc.ctx_id, .seqno = s.out_seqno,
					    .timeout_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
							  5000000000ull };
		*what = "wait";
		if ((r = xioctl(fd, DRM_IOCTL_AIGPU_WAIT, &w)))
			goto out;
	}
	*what = "fill result";
	r = cmd[1024] == 0x5a5a5a5au ? 0 : -EIO;
out:
	munmap(cmd, size);
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s BDF [JOBS]\n", argv[0]);
		return 2;
	}
	snprintf(bdf, sizeof(bdf), "%s", argv[1]);
	intx = getenv("PCI_TEST_IRQ") && !strcmp(getenv("PCI_TEST_IRQ"), "intx");
	const char *kind = intx ? "INTx" : "MSI";
	unsigned jobs = argc == 3 ? (unsigned)strtoul(argv[2], NULL, 0) : 16;

	/* drmGetDevices2: the function, with its ids and a render node. */
	drmDevicePtr devs[16];
	int n = drmGetDevices2(0, devs, 16);
	char render[64] = "";
	int listed = 0;
	for (int i = 0; i < n; i++) {
		if (!at_bdf(devs[i]))
			continue;
		listed = devs[i]->deviceinfo.pci->vendor_id == EDU_VENDOR &&
			 devs[i]->deviceinfo.pci->device_id == EDU_DEVICE &&
			 (devs[i]->available_nodes & (1 << DRM_NODE_RENDER));
		if (listed)
			snprintf(render, sizeof(render), "%s", devs[i]->nodes[DRM_NODE_RENDER]);
	}
	CHECK("drmGetDevices2-lists-the-function", listed, "drmGetDevices2 returned %d, none a PCI device at %s with ids %04x:%04x and a render node", n, bdf, EDU_VENDOR, EDU_DEVICE);
	if (n > 0)
		drmFreeDevices(devs, n);
	if (!listed) {
		printf(GUEST_TEST ": %d passed, %d failed\n", passed, failed);
		return 1;
	}
	printf(GUEST_TEST ": %s: render node %s\n", bdf, render);

	/* drmGetDevice2 and drmGetVersion on the render node. */
	int fd = open(render, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fail("open-render-node", "%s: %s", render, strerror(errno));
		printf(GUEST_TEST ": %d passed, %d failed\n", passed, failed);
		return 1;
	}
	drmDevicePtr d = NULL;
	int r = drmGetDevice2(fd, 0, &d);
	CHECK("drmGetDevice2-on-render-node", r == 0 && d && at_bdf(d) && d->deviceinfo.pci->vendor_id == EDU_VENDOR &&
	      d->deviceinfo.pci->device_id == EDU_DEVICE,
	      "rc=%d bustype=%d", r, d ? d->bustype : -1);
	if (d)
		drmFreeDevice(&d);
	drmVersionPtr v = drmGetVersion(fd);
	CHECK("drmGetVersion-names-aigpu", v && !strcmp(v->name, "aigpu"), "name %s", v ? v->name : "(none)");
	if (v)
		drmFreeVersion(v);

	/* Jobs and the function's MSI. */
	struct stat st;
	unsigned minor = fstat(fd, &st) == 0 ? minor(st.st_rdev) : 0;
	long long irq0 = msi_count(), jobs0 = status_field(minor, "jobs"), top0 = status_field(minor, "irqs");
	const char *what = "";
	r = run_jobs(fd, jobs, &what);
	CHECK("jobs-complete", r == 0, "%s: rc=%d", what, r);
	/* The top half's count first: an interrupt is counted in /proc/interrupts before its handler
	 * runs the top half, so one that comes late (its job's WAIT returned on the fence before the
	 * interrupt was taken) may be in the interrupt count without its top half, never the other
	 * way round. Read the other way, a late one could be in the top half's count alone. */
	long long top1 = status_field(minor, "irqs"), jobs1 = status_field(minor, "jobs"), irq1 = msi_count();
	printf(GUEST_TEST ": %u jobs: %s %lld -> %lld, top half %lld -> %lld, debugfs jobs %lld -> %lld\n", jobs,
	       kind, irq0, irq1, top0, top1, jobs0, jobs1);
	CHECK("proc-interrupts-line", irq0 >= 0, "no %s line naming aigpu in /proc/interrupts",
	      intx ? "IO-APIC (non-MSI)" : "PCI-MSI-<BDF>");
	CHECK("debugfs-jobs-count", jobs0 >= 0 && jobs1 - jobs0 == jobs, "jobs %lld -> %lld, want +%u", jobs0, jobs1,
	      jobs);
	CHECK("msi-count-grows-with-jobs", irq0 >= 0 && irq1 > irq0, "%s %lld -> %lld after %u jobs", kind, irq0, irq1,
	      jobs);
	CHECK("every-top-half-from-the-msi", top0 >= 0 && irq1 - irq0 >= top1 - top0 && top1 > top0,
	      "%s +%lld, top half +%lld", kind, irq1 - irq0, top1 - top0);
	close(fd);
	printf(GUEST_TEST ": %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

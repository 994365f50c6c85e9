# bench/transfer — KV transfer bandwidth vs ucx_perftest (ucp_put_bw) in the same run
# (docs/contracts.md §h: bench/results/transfer.json). `make bench-transfer`.
noinst_PROGRAMS += bench/transfer
bench_transfer_SOURCES = bench/transfer.c bench/transfer_wait.c bench/transfer_wait.h
bench_transfer_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
bench_transfer_LDADD = $(XFER_LIBS)
EXTRA_DIST += bench/transfer.sh

# bench/transfer_floor — the same windowed transfer with nothing but the copy, a loopback socket
# and the wakes (two single-threaded processes): what any engine of this shape can reach here
noinst_PROGRAMS += bench/transfer_floor
bench_transfer_floor_SOURCES = bench/transfer_floor.c
bench_transfer_floor_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
bench_transfer_floor_LDADD = $(XFER_LIBS)

bench-transfer: bench/transfer bench/transfer_floor
	$(SHELL) $(top_srcdir)/bench/transfer.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-transfer

# bench/checksum_segments — what the segment sums (PD) and the per-sub-buffer HiCache checksums
# cost beside their anchors in one run (docs/contracts.md §h: bench/results/checksum_segments.json).
# `make bench-checksum-segments`; build without sanitizers for numbers worth keeping.
noinst_PROGRAMS += bench/checksum_segments
bench_checksum_segments_SOURCES = bench/checksum_segments.c
bench_checksum_segments_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
bench_checksum_segments_LDADD = $(XFER_LIBS)

bench-checksum-segments: bench/checksum_segments
	TDM_BENCH_GIT_SHA=$$(git -C '$(abs_top_srcdir)' rev-parse HEAD 2>/dev/null || echo unknown) \
	    ./bench/checksum_segments --out '$(abs_top_srcdir)/bench/results/checksum_segments.json'
.PHONY: bench-checksum-segments

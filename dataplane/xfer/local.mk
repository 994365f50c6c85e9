# dataplane/xfer/ — PD transfer: rooms (KVPoll, I4), bootstrap, abort handshake, data movers.
noinst_LIBRARIES += libtdmxfer.a
libtdmxfer_a_SOURCES = \
	dataplane/xfer/room.c
noinst_HEADERS += dataplane/xfer/room.h
libtdmxfer_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)

check_PROGRAMS += tests/unit/test-xfer-room
TESTS += tests/unit/test-xfer-room
tests_unit_test_xfer_room_SOURCES = tests/unit/test-xfer-room.c
tests_unit_test_xfer_room_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_xfer_room_LDADD = libtdmxfer.a $(COMMON_LIBS)

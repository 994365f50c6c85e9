# common/ — small and boring shared code: status, log, params, arena, json, time, hashing.
noinst_LIBRARIES += libtdmcommon.a
libtdmcommon_a_SOURCES = \
	common/status.c
noinst_HEADERS += \
	include/tdm/status.h

# common/ — small and boring shared code: status, log, params, arena, json, time, hashing.
noinst_LIBRARIES += libtdmcommon.a
libtdmcommon_a_SOURCES = \
	common/status.c \
	common/log.c \
	common/mem.c \
	common/arena.c \
	common/time.c
noinst_HEADERS += \
	include/tdm/status.h \
	include/tdm/log.h \
	include/tdm/mem.h \
	include/tdm/arena.h \
	include/tdm/time.h \
	include/tdm/layout.h

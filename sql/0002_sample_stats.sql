-- 0002_sample_stats: the serving statistics of telemetry samples, and when tandemd received them.
--
-- The statistics (docs/contracts.md, telemetry) are optional on the wire and 0 when a worker does
-- not send them, so the columns are NOT NULL DEFAULT 0: rows written before this migration read as
-- 0 (adding a column with a constant default rewrites nothing). recv_us is tandemd's wall clock when
-- the sample's batch arrived (ingest lag = recv_us - ts_us); NULL for rows written before.

ALTER TABLE samples
    ADD COLUMN tokens_out       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN requests_done    bigint  NOT NULL DEFAULT 0,
    ADD COLUMN ttft_p50_us      bigint  NOT NULL DEFAULT 0,
    ADD COLUMN ttft_p99_us      bigint  NOT NULL DEFAULT 0,
    ADD COLUMN itl_p50_us       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN itl_p99_us       bigint  NOT NULL DEFAULT 0,
    ADD COLUMN kv_pages_used    bigint  NOT NULL DEFAULT 0,
    ADD COLUMN kv_pages_total   bigint  NOT NULL DEFAULT 0,
    ADD COLUMN host_pages_used  bigint  NOT NULL DEFAULT 0,
    ADD COLUMN host_pages_total bigint  NOT NULL DEFAULT 0,
    ADD COLUMN corruption_total bigint  NOT NULL DEFAULT 0,
    ADD COLUMN recv_us          bigint;

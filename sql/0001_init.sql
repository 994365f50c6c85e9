-- 0001_init: the control plane's first schema.
--
-- Times are integer microseconds since the epoch (docs/design.md §6); 64-bit ids and hashes are stored as
-- bigint and rendered as lowercase hex by tandemd. High-volume telemetry (samples, transfer
-- events, events) is range-partitioned by ts_us in one-day partitions, created two periods ahead
-- by tdm_partitions_ensure() plus a DEFAULT partition for anything outside them; retention drops
-- whole partitions (tdm_partitions_drop_before). Applied by tandemd in one transaction together
-- with its schema_migrations row.

CREATE TABLE groups (
    name        text PRIMARY KEY,
    mode        text NOT NULL CHECK (mode IN ('prefill', 'decode', 'null')),
    model       text NOT NULL DEFAULT '',
    tp_size     integer NOT NULL CHECK (tp_size >= 1),
    created_us  bigint NOT NULL,
    updated_us  bigint NOT NULL
);

CREATE TABLE workers (
    instance_id   text NOT NULL,
    rank          integer NOT NULL CHECK (rank >= 0),
    group_name    text NOT NULL REFERENCES groups (name),
    worker        text NOT NULL,
    admin_url     text NOT NULL DEFAULT '',
    host          text NOT NULL DEFAULT '',
    pid           integer,
    registered_us bigint NOT NULL,
    last_seen_us  bigint NOT NULL,
    PRIMARY KEY (instance_id, rank)
);
CREATE INDEX workers_group_idx ON workers (group_name);

-- One row per persisted snapshot (thinned to 10 Hz per rank; every sample while an alert is open).
CREATE TABLE samples (
    ts_us       bigint NOT NULL,
    instance_id text NOT NULL,
    rank        integer NOT NULL,
    group_name  text NOT NULL,
    batch_seq   bigint NOT NULL,
    iter        bigint NOT NULL,
    path        text NOT NULL,
    plan_hash   bigint NOT NULL,
    coll_seq    bigint NOT NULL,
    coll_hash   bigint NOT NULL,
    in_coll     jsonb,
    bs          integer NOT NULL,
    waiting     integer NOT NULL,
    running     integer NOT NULL
) PARTITION BY RANGE (ts_us);
CREATE TABLE samples_default PARTITION OF samples DEFAULT;
CREATE INDEX samples_ts_brin ON samples USING brin (ts_us);
CREATE INDEX samples_rank_ts_idx ON samples (instance_id, rank, ts_us);

-- Telemetry events that name a room (KVPoll transitions, aborts, checksums): every one, exactly once.
CREATE TABLE transfer_events (
    ts_us       bigint NOT NULL,
    instance_id text NOT NULL,
    rank        integer NOT NULL,
    group_name  text NOT NULL,
    batch_seq   bigint NOT NULL,
    idx         integer NOT NULL,
    type        text NOT NULL,
    room        bigint NOT NULL,
    from_state  text,
    to_state    text,
    reason      text,
    data        jsonb
) PARTITION BY RANGE (ts_us);
CREATE TABLE transfer_events_default PARTITION OF transfer_events DEFAULT;
CREATE INDEX transfer_events_ts_brin ON transfer_events USING brin (ts_us);
CREATE INDEX transfer_events_room_idx ON transfer_events (room, ts_us);

-- Every other event: telemetry events without a room, and tandemd's own (source 'tandemd').
CREATE TABLE events (
    ts_us       bigint NOT NULL,
    source      text NOT NULL,
    instance_id text NOT NULL DEFAULT '',
    rank        integer,
    group_name  text NOT NULL DEFAULT '',
    batch_seq   bigint,
    idx         integer,
    type        text NOT NULL,
    reason      text,
    data        jsonb
) PARTITION BY RANGE (ts_us);
CREATE TABLE events_default PARTITION OF events DEFAULT;
CREATE INDEX events_ts_brin ON events USING brin (ts_us);
CREATE INDEX events_origin_idx ON events (instance_id, rank, batch_seq, idx);

CREATE TABLE alerts (
    id          bigserial PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('WEDGE', 'RANK_DIVERGENCE', 'TRANSFER_STALL',
                    'ABORT_UNACKED', 'CORRUPTION', 'LAYOUT_MISMATCH', 'WORKER_LOST',
                    'OUTPUT_ANOMALY')),
    group_name  text NOT NULL,
    state       text NOT NULL CHECK (state IN ('open', 'resolved')),
    summary     text NOT NULL,
    evidence    jsonb NOT NULL,
    opened_us   bigint NOT NULL,
    resolved_us bigint,
    resolved_by text
);
CREATE INDEX alerts_open_idx ON alerts (group_name, kind) WHERE state = 'open';
CREATE INDEX alerts_opened_idx ON alerts (opened_us);

-- The audit log: who did what, when, and how it ended (invariant I9).
CREATE TABLE actions (
    id          bigserial PRIMARY KEY,
    ts_us       bigint NOT NULL,
    actor       text NOT NULL,
    action      text NOT NULL,
    target      text NOT NULL DEFAULT '',
    params      jsonb,
    outcome     text NOT NULL CHECK (outcome IN ('pending', 'ok', 'failed')),
    detail      text,
    finished_us bigint
);
CREATE INDEX actions_ts_idx ON actions (ts_us);

CREATE TABLE config_versions (
    id          bigserial PRIMARY KEY,
    group_name  text,
    created_us  bigint NOT NULL,
    created_by  text NOT NULL,
    config      jsonb NOT NULL
);
CREATE INDEX config_versions_group_idx ON config_versions (group_name, id);

-- Bearer tokens: only the SHA-256 of the secret is stored.
CREATE TABLE api_tokens (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    role        text NOT NULL CHECK (role IN ('admin', 'read')),
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_us  bigint NOT NULL,
    revoked_us  bigint
);

-- Exactly-once ingest: the last committed telemetry batch per (instance_id, rank).
CREATE TABLE ingest_marks (
    instance_id text NOT NULL,
    rank        integer NOT NULL,
    seq         bigint NOT NULL,
    updated_us  bigint NOT NULL,
    PRIMARY KEY (instance_id, rank)
);

-- Name of the one-day partition of `parent` holding `ts_us`.
CREATE FUNCTION tdm_partition_name(parent text, ts_us bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT parent || '_p' || to_char(date '1970-01-01' + (ts_us / 86400000000)::integer, 'YYYYMMDD')
$$;

-- Create the partitions of `parent` for the day holding now_us and `ahead` days after it.
-- Returns how many were created. Idempotent.
CREATE FUNCTION tdm_partitions_ensure(parent text, now_us bigint, ahead integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day_us constant bigint := 86400000000;
    lo bigint;
    part text;
    created integer := 0;
BEGIN
    FOR i IN 0 .. ahead LOOP
        lo := (now_us / day_us + i) * day_us;
        part := tdm_partition_name(parent, lo);
        IF to_regclass(part) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)',
                           part, parent, lo, lo + day_us);
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

-- Retention: drop the day partitions of `parent` that end at or before cutoff_us.
CREATE FUNCTION tdm_partitions_drop_before(parent text, cutoff_us bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    child record;
    dropped integer := 0;
    day_lo bigint;
BEGIN
    FOR child IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = parent::regclass AND c.relname ~ ('^' || parent || '_p[0-9]{8}$')
    LOOP
        day_lo := (to_date(right(child.relname, 8), 'YYYYMMDD') - date '1970-01-01')::bigint
                  * 86400000000;
        IF day_lo + 86400000000 <= cutoff_us THEN
            EXECUTE format('DROP TABLE %I', child.relname);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;

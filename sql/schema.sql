-- schema.sql — a stable description of the control plane schema for the migrations diff
-- (tests/integration/test-cp-migrate.sh compares its output with sql/expected/schema.out).
-- Dated partitions are counted, not listed, so the output does not depend on the day.
\pset footer off
SELECT c.relname COLLATE "C" AS rel, c.relkind AS kind, a.attname AS col,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull,
       pg_get_expr(d.adbin, d.adrelid) AS default
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname !~ '_p[0-9]{8}$'
ORDER BY 1, a.attnum;

SELECT tablename COLLATE "C" AS tbl, indexname COLLATE "C" AS idx, indexdef
FROM pg_indexes
WHERE schemaname = 'public' AND tablename !~ '_p[0-9]{8}$'
ORDER BY 1, 2;

SELECT conrelid::regclass::text COLLATE "C" AS rel, conname COLLATE "C" AS con,
       pg_get_constraintdef(oid) AS def
FROM pg_constraint
WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text !~ '_p[0-9]{8}$'
ORDER BY 1, 2;

SELECT p.relname COLLATE "C" AS parent, pg_get_partkeydef(p.oid) AS partkey,
       count(*) FILTER (WHERE c.relname ~ '_p[0-9]{8}$') AS day_partitions,
       count(*) FILTER (WHERE c.relname ~ '_default$') AS default_partitions
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE p.relkind = 'p'
GROUP BY p.relname, p.oid
ORDER BY 1;

SELECT proname COLLATE "C" AS function, pg_get_function_arguments(oid) AS args,
       pg_get_function_result(oid) AS result
FROM pg_proc
WHERE pronamespace = 'public'::regnamespace
ORDER BY 1;

SELECT version, name FROM schema_migrations ORDER BY version;

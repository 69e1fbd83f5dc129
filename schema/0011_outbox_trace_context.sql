-- The trace context (W3C traceparent/tracestate) of the transaction that enqueued an entry, so the
-- delivery continues that trace. NULL when tracing was off; nullable with no default: instant.
ALTER TABLE outbox ADD COLUMN trace_context jsonb;

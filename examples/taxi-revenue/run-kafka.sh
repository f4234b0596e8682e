#!/usr/bin/env bash
# Seed 001 end to end on real services: a Kafka-protocol broker (tansu) and PostgreSQL,
# both started by scripts/services.sh on private ports. Loads rides.jsonl into the topic
# `rides`, runs kafka-postgres.toml, and prints processed_events_aggregated.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build
scripts/services.sh start >/dev/null
KAFKA=$(scripts/services.sh env | sed -n "s/^KAFKA=//p")
# The broker keeps topics in memory: create the topic if this broker has not got it.
scripts/services.sh topic rides 1
target/release/weir produce examples/taxi-revenue/rides.jsonl --brokers "$KAFKA" --topic rides --key PULocationID
target/release/weir run examples/taxi-revenue/kafka-postgres.toml --fresh
scripts/services.sh psql "SELECT * FROM processed_events_aggregated ORDER BY window_start, pulocationid"

#!/bin/sh
# Traffic generator for docker-compose.yml (runs in natsio/nats-box), one per region.
# Publishes batches of $BATCH orders to orders.$PREFIX.created with a JetStream ack, forever.
# Every message has a unique Nats-Msg-Id, and Entity-Id/Entity-Version headers: order N of every
# batch is the same entity, updated once per batch; its version is the batch's start time in
# seconds, so it keeps growing across restarts of this container and the link's version guard has
# something to compare.
set -eu
: "${PREFIX:?}" "${BATCH:=100}" "${SLEEP:=100ms}"
run=$(date +%s)
batch=0
while true; do
  batch=$((batch + 1))
  version=$(date +%s)
  nats pub "orders.$PREFIX.created" "order {{Count}} of batch $batch from $PREFIX at {{TimeStamp}}" \
    --jetstream --quiet \
    --count "$BATCH" --sleep "$SLEEP" \
    -H "Nats-Msg-Id:$PREFIX-$run-$batch-{{Count}}" \
    -H "Entity-Id:order-$PREFIX-{{Count}}" \
    -H "Entity-Version:$version"
  echo "batch $batch: $BATCH messages published to orders.$PREFIX.created"
done

#!/bin/sh
# One-shot stream setup for docker-compose.yml (runs in natsio/nats-box).
# Creates, in each region, the source stream ORDERS and the replica stream ORDERS_REPLICA that the
# other region's link writes into. File storage, 3 replicas, limits retention, 2 minute duplicate
# window (Nats-Msg-Id). Re-running it is harmless: existing streams are left alone.
set -eu

add_stream() { # server password name subjects
  server=$1 password=$2 name=$3 subjects=$4
  if nats --server "$server" --user relay --password "$password" stream info "$name" >/dev/null 2>&1; then
    echo "stream $name already exists on $server"
    return 0
  fi
  nats --server "$server" --user relay --password "$password" stream add "$name" \
    --subjects "$subjects" \
    --storage file \
    --replicas 3 \
    --retention limits \
    --discard old \
    --max-age 24h \
    --max-msgs=-1 \
    --max-bytes=-1 \
    --max-msg-size=-1 \
    --dupe-window 2m \
    --defaults
}

US="nats://us-east-n1:4222,nats://us-east-n2:4222,nats://us-east-n3:4222"
EU="nats://eu-west-n1:4222,nats://eu-west-n2:4222,nats://eu-west-n3:4222"

add_stream "$US" "$US_PASSWORD" ORDERS 'orders.us.>'
add_stream "$US" "$US_PASSWORD" ORDERS_REPLICA 'orders.eu.>'
add_stream "$EU" "$EU_PASSWORD" ORDERS 'orders.eu.>'
add_stream "$EU" "$EU_PASSWORD" ORDERS_REPLICA 'orders.us.>'
echo "streams ready"

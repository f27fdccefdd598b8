# syntax=docker/dockerfile:1
# jetstream-relay container image.
#   docker build -t jetstream-relay .
#   docker run --rm -v $PWD/relay.yaml:/etc/jetstream-relay/relay.yaml:ro -p 9464:9464 \
#     -e RELAY_REGION=us-east jetstream-relay
# The config is read from RELAY_CONFIG (/etc/jetstream-relay/relay.yaml) and the region from
# RELAY_REGION, or from `run --config F --region R` given as the command. Its http.listen must be
# reachable from outside the container ("0.0.0.0:9464"); the health check asks the address
# http.listen names (RELAY_HTTP when --http overrode it).

# ---- build: compile TypeScript to dist/ --------------------------------------------------------
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: the build needs tsc only (test-only native add-ons are not built).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# ---- prod-deps: runtime dependencies only -------------------------------------------------------
FROM node:22-bookworm-slim AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# ---- runtime -------------------------------------------------------------------------------------
FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# The relay writes nothing to disk: the image runs as the unprivileged `node` user (uid 1000) and
# works with a read-only root filesystem. Mount the config at /etc/jetstream-relay/relay.yaml.
USER node
EXPOSE 9464
ENV RELAY_CONFIG=/etc/jetstream-relay/relay.yaml
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "dist/cli.js", "health"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["run"]

# syntax=docker/dockerfile:1
# jetstream-relay container image.
#   docker build -t jetstream-relay .
#   docker run --rm -v $PWD/relay.yaml:/etc/jetstream-relay/relay.yaml:ro -p 9464:9464 \
#     jetstream-relay run --config /etc/jetstream-relay/relay.yaml --region us-east

# ---- build: compile TypeScript to dist/ --------------------------------------------------------
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: the build needs tsc only (test-only native add-ons are not built).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# ---- prod-deps: runtime dependencies only -------------------------------------------------------
FROM node:20-bookworm-slim AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# ---- runtime -------------------------------------------------------------------------------------
FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# The relay writes nothing to disk: the image runs as the unprivileged `node` user (uid 1000) and
# works with a read-only root filesystem. Mount the config at /etc/jetstream-relay/relay.yaml.
USER node
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9464/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["run", "--config", "/etc/jetstream-relay/relay.yaml"]

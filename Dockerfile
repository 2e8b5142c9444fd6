# syntax=docker/dockerfile:1

# keyfleet: one image holding both binaries, the worker daemon and the
# producer CLI, in /usr/local/bin.
#
#   docker build -t keyfleet:dev --build-arg VERSION="$(git describe --tags --always --dirty)" .
#   docker run --rm -v "$PWD/kf.yaml:/etc/keyfleet/keyfleet.yaml:ro" -e KEY_A keyfleet:dev worker --config /etc/keyfleet/keyfleet.yaml
#   docker run --rm keyfleet:dev producer status --config ...
#
# Nothing secret goes into the image: no credential, no .env, no config file.
# The config is mounted at run time, and each credential's secret comes from
# the environment (secret_env) or a mounted file (secret_file) of the running
# container. .dockerignore keeps secrets/, .env and data/ out of the build
# context altogether.

# Keep GO_VERSION equal to the go directive of go.mod (deploy/deploy_test.go
# checks it).
ARG GO_VERSION=1.26.8
ARG ALPINE_VERSION=3.24

# ---- build: static binaries for the target platform ------------------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-alpine AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath

# Modules first, as their own layer: it is rebuilt only when go.mod or
# go.sum change, not on every source edit.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build \
      -ldflags "-s -w -X github.com/keyfleet/keyfleet/internal/version.Version=${VERSION}" \
      -o /out/ ./cmd/... \
 && test -x /out/producer && test -x /out/worker

# ---- runtime ----------------------------------------------------------------
# Why alpine and not distroless: the exec job kind runs the user's command,
# usually a shell script, so the image needs /bin/sh and the usual small tools
# (busybox). Alpine gives that in ~8 MB. distroless/static has no shell and
# would make exec jobs fail. Scripts that need more (bash, python, jq, curl)
# extend this image: FROM keyfleet, USER root, apk add ..., USER 10001.
#
# tini runs as PID 1: it forwards SIGTERM to the worker (whose first SIGTERM
# is a graceful drain) and reaps orphaned grandchildren of exec jobs, which a
# Go process as PID 1 would leave as zombies.
FROM alpine:${ALPINE_VERSION}
ARG VERSION=dev
LABEL org.opencontainers.image.title="keyfleet" \
      org.opencontainers.image.description="keyfleet worker and producer: a fleet of workers sharing a pool of rate-limited API credentials" \
      org.opencontainers.image.source="https://github.com/keyfleet/keyfleet" \
      org.opencontainers.image.version="${VERSION}"

RUN apk add --no-cache ca-certificates tini tzdata \
 && addgroup -S -g 10001 keyfleet \
 && adduser -S -D -u 10001 -G keyfleet -h /home/keyfleet -s /bin/sh keyfleet

COPY --from=build /out/producer /out/worker /usr/local/bin/

# A numeric non-root user, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /home/keyfleet

# worker.listen in the shipped configs: /metrics, /healthz, /readyz.
EXPOSE 9464

# `docker run IMAGE worker --config FILE` and `docker run IMAGE producer
# status` both work: the first argument names the binary. With no arguments
# the container runs the worker (with the config from KEYFLEET_CONFIG, or
# the built-in defaults).
ENTRYPOINT ["/sbin/tini", "--"]
CMD ["worker"]

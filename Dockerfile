# syntax=docker/dockerfile:1
# kubewasm: the host binary (static, musl), its language engines and the three example plugins,
# on an empty base.
#   docker build --build-arg REVISION="$(git rev-parse HEAD)" -t kubewasm:0.1.0 .
# `make image` builds the same image without a Docker engine (deploy/image/build.sh): it runs
# the same deploy/image/rootfs.sh and reads the final stage's config (USER, WORKDIR, ENV, EXPOSE,
# LABEL, ENTRYPOINT, the owners of COPY --chown) from this file, so the two must agree;
# host/tests/image_e2e.rs checks the built image against this final stage.
FROM docker.io/library/rust:1.95.0-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools binutils ca-certificates python3-venv nodejs npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# `rustup toolchain install` with no argument installs what rust-toolchain.toml names (with
# wasm32-wasip2); the static host binary needs the musl target of this machine's architecture.
RUN rustup toolchain install && rustup target add "$(uname -m)-unknown-linux-musl"
# ring compiles C: for musl with musl-gcc (musl-tools).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    musl="$(uname -m)-unknown-linux-musl" \
 && env "CC_$(echo "$musl" | tr - _)=musl-gcc" cargo build --profile image --locked --target "$musl" -p kubewasm \
 && cargo build --locked --profile plugin --target wasm32-wasip2 \
      -p namespace-defaults -p config-reloader -p configmap-sync \
 && make engines KUBEWASM_ENGINE_DIR=/engines \
 && deploy/image/precompile-engines.sh "target/$musl/image/kubewasm" /engines \
 && deploy/image/rootfs.sh /image "target/$musl/image/kubewasm" target/wasm32-wasip2/plugin \
      /etc/ssl/certs/ca-certificates.crt /engines

# Runtime: nothing but deploy/image/rootfs.sh's files; user 65532 (nonroot, as in distroless).
FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=builder /image/root/ /
COPY --from=builder --chown=65532:65532 /image/nonroot/home/nonroot /home/nonroot
COPY --from=builder --chown=65532:65532 /image/nonroot/var/cache/kubewasm /var/cache/kubewasm
USER 65532:65532
WORKDIR /home/nonroot
ENV PATH=/usr/local/bin
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENV KUBEWASM_PLUGINS=/opt/kubewasm/plugins
ENV KUBEWASM_ADMIN_ADDR=0.0.0.0:8080
ENV KUBEWASM_COMPILE_CACHE=/var/cache/kubewasm
EXPOSE 8080
LABEL org.opencontainers.image.title=kubewasm
LABEL org.opencontainers.image.source=https://github.com/kubewasm/kubewasm
LABEL org.opencontainers.image.licenses=Apache-2.0
LABEL org.opencontainers.image.version=${VERSION}
LABEL org.opencontainers.image.revision=${REVISION}
ENTRYPOINT ["/usr/local/bin/kubewasm", "run"]

# syntax=docker/dockerfile:1
# kubewasm: the host binary and the three example plugins, on distroless.
#   docker build -t kubewasm:0.1.0 .
# Builder: the toolchain rust-toolchain.toml pins (with its wasm32-wasip2 target), on Debian 12
# like the runtime image, so the binary links against the same glibc.
FROM docker.io/library/rust:1.95.0-bookworm AS builder
WORKDIR /src
COPY . .
# `rustup toolchain install` with no argument installs what rust-toolchain.toml names.
RUN rustup toolchain install && rustup target list --installed | grep -qx wasm32-wasip2
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p kubewasm \
 && cargo build --locked --profile plugin --target wasm32-wasip2 \
      -p namespace-defaults -p config-reloader -p configmap-sync \
 && mkdir -p /out/plugins \
 && cp target/release/kubewasm /out/kubewasm \
 && for p in namespace-defaults config-reloader configmap-sync; do \
      cp "target/wasm32-wasip2/plugin/$(echo "$p" | tr - _).wasm" "/out/plugins/$p.wasm"; \
    done

# Runtime: glibc and libgcc only, user 65532 (nonroot). The example plugins' configs are not
# baked in: deploy/overlays/examples mounts them beside the components.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/kubewasm /usr/local/bin/kubewasm
COPY --from=builder /out/plugins/ /opt/kubewasm/plugins/
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kubewasm"]
CMD ["run", "--plugins", "/opt/kubewasm/plugins", "--admin-addr", "0.0.0.0:8080"]

# retrylab: a small image that serves the lab on 0.0.0.0:8080 as a non-root user, with its
# SQLite store on a volume at /data.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# Dependencies first, in a layer of their own: it is rebuilt only when Cargo.toml or
# Cargo.lock change, not on every change to the source.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && cargo build --release --locked --bin retrylab \
    && rm -rf src target/release/.fingerprint/retrylab-* target/release/deps/*retrylab*
# Then only what the binary is built from: no tests, no examples.
COPY src src
COPY templates templates
COPY static static
COPY migrations migrations
COPY scripts scripts
RUN scripts/build-release.sh /out

FROM debian:bookworm-slim
# `retrylab check` probes https APIs against the platform's certificate roots.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin retrylab \
    && mkdir -p /data && chown retrylab /data
COPY --from=build /out/retrylab /usr/local/bin/retrylab
USER retrylab
# Metrics name every lab, so they get a port of their own, never the public one: publish
# 9091 only to your scraper (fly.toml scrapes it over the private network).
ENV RETRYLAB_ADDR=0.0.0.0:8080 \
    RETRYLAB_METRICS_ADDR=0.0.0.0:9091 \
    RETRYLAB_DB=/data/retrylab.db \
    RETRYLAB_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
# retrylab stops accepting, lets open requests finish and commits its store on SIGTERM.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/retrylab"]

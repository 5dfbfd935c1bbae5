# Liftbridge in an image with nothing but its static binary and two configs. It needs no
# base image, so it builds without a registry. `make docker-image` assembles the context.
FROM scratch
COPY liftbridge /usr/local/bin/liftbridge
COPY etc/ /etc/liftbridge/
# The data volume starts as a directory owned by the non-root user.
COPY --chown=1001:1001 data/ /data/
# The embedded NATS config reads its port from here (override with -e NATS_PORT=...).
ENV NATS_PORT=4222
USER 1001:1001
VOLUME ["/data"]
EXPOSE 9292 4222
# SIGINT stops Liftbridge gracefully; it does not handle SIGTERM.
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/liftbridge"]
CMD ["-c", "/etc/liftbridge/single.yaml"]

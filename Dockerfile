# The pulsar-proxy image for operators who build with Docker:
#   docker build --build-arg VERSION=$(git describe --tags --always) -t pulsar-proxy .
# The tested path is `make image` (tools/image), which builds the same image without a Docker
# daemon; tools/image/dockerfile_test.go keeps this file and it in step (build flags, user,
# ports, entrypoint, labels). Run it with brokers named in the environment, e.g.
#   docker run -e PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://broker:6650 -p 6650:6650 pulsar-proxy

FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/pulsar-proxy ./cmd/pulsar-proxy

FROM scratch
ARG VERSION=dev
ARG REVISION=
ARG CREATED=
COPY --from=build /out/pulsar-proxy /pulsar-proxy
COPY deploy/container/config.yaml /etc/pulsar-proxy/config.yaml
# Numeric, so the image needs no /etc/passwd.
USER 65532:65532
EXPOSE 6650/tcp 6651/tcp 8080/tcp 8443/tcp
LABEL org.opencontainers.image.title="pulsar-proxy" \
      org.opencontainers.image.description="A gateway in front of Apache Pulsar brokers, speaking the Pulsar binary protocol" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
ENTRYPOINT ["/pulsar-proxy"]
CMD ["--config", "/etc/pulsar-proxy/config.yaml"]

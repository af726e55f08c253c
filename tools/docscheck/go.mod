module github.com/pulsar-proxy/pulsar-proxy/tools/docscheck

go 1.26.7

require (
	github.com/yuin/goldmark v1.8.7
	gopkg.in/yaml.v3 v3.0.1
)

module liftbridge-client/bench

go 1.25.3

require github.com/liftbridge-io/go-liftbridge/v2 v2.4.0

require (
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/liftbridge-io/liftbridge-api/v2 v2.0.0 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/serialx/hashring v0.0.0-20200727003509-22c0c7ab6b1b // indirect
	golang.org/x/net v0.30.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
	golang.org/x/text v0.24.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241015192408-796eee8c2d53 // indirect
	google.golang.org/grpc v1.69.2 // indirect
	google.golang.org/protobuf v1.36.1 // indirect
)

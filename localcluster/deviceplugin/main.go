// Command elasticjob-fake-gpu-plugin is a kubelet device plugin (API v1beta1) that advertises
// fake nvidia.com/gpu devices, so that the real scheduler and kubelet allocate them exclusively
// on a local cluster without GPUs.
//
// It serves the DevicePlugin service on <dir>/<socket> and registers with <dir>/kubelet.sock;
// whenever the kubelet recreates that socket (a kubelet start forgets every plugin and empties
// the directory) it serves on a new socket and registers again. Allocate gives each container NVIDIA_VISIBLE_DEVICES with the allocated device ids,
// comma-separated, as NVIDIA's plugin does; no device node is mounted.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; the fake devices never change health.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// Allocate answers one response per container, naming the devices the kubelet chose.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.devices {
		known[d.ID] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		for _, id := range c.DevicesIDs {
			if !known[id] {
				return nil, fmt.Errorf("unknown device %q", id)
			}
		}
		log.Printf("allocate %v", c.DevicesIDs)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIDs, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(dir, socket, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     socket,
		ResourceName: resource,
	})
	return err
}

// inode of path, 0 when it does not exist.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

func main() {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	socket := flag.String("socket", "elasticjob-fake-gpu.sock", "this plugin's socket name in -dir")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	count := flag.Int("count", 4, "number of fake devices")
	prefix := flag.String("id-prefix", "GPU-fake-", "device id prefix; ids are <prefix>0 ... <prefix>N-1")
	flag.Parse()
	if *count < 0 {
		log.Fatalf("-count=%d: must be >= 0", *count)
	}

	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s%d", *prefix, i), Health: pluginapi.Healthy})
	}
	path := filepath.Join(*dir, *socket)
	var server *grpc.Server
	// serve (re)creates this plugin's socket: the kubelet deletes every file in its
	// device-plugin directory when it starts, so each new kubelet needs a new socket.
	serve := func() {
		if server != nil {
			server.Stop()
		}
		_ = os.Remove(path)
		lis, err := net.Listen("unix", path)
		if err != nil {
			log.Fatalf("listen on %s: %v", path, err)
		}
		server = grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(server, p)
		go func(s *grpc.Server) {
			if err := s.Serve(lis); err != nil {
				log.Printf("serve: %v", err)
			}
		}(server)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	kubelet := filepath.Join(*dir, "kubelet.sock")
	var registered uint64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// Register whenever the kubelet's socket is new (first start or kubelet restart).
		if ino := inode(kubelet); ino != 0 && ino != registered {
			serve()
			if err := register(*dir, *socket, *resource); err != nil {
				log.Printf("register with %s: %v (retrying)", kubelet, err)
			} else {
				registered = ino
				log.Printf("registered %d x %s with %s", *count, *resource, kubelet)
			}
		}
		select {
		case <-stop:
			if server != nil {
				server.Stop()
			}
			_ = os.Remove(path)
			return
		case <-tick.C:
		}
	}
}

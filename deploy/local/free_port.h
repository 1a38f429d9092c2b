#pragma once
// Picks a loopback TCP port nobody listens on, for the internal gRPC links.
namespace ft::local {
int free_loopback_port();
}

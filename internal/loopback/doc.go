// Package loopback sets up the loopback interface of a new network
// namespace, which the kernel makes with lo down.
package loopback

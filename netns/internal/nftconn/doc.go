// Package nftconn holds what corpus's nftables tables (the layer-2 filter
// and the NAT forwards) share: a netlink socket sized for one large
// batch, reading a table back, comparing chains and rules with the ones
// corpus writes, and writing set elements in bounded messages.
package nftconn

// pool.h's device helpers on the host, level1/41's window (pool_host_check.inc says how).
#define KFAB_POOL_WIN 41
#include "pool_host_check.inc"

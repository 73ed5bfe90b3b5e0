// pool.h's device helpers on the host, level1/43's window (pool_host_check.inc says how).
#define KFAB_POOL_WIN 43
#include "pool_host_check.inc"

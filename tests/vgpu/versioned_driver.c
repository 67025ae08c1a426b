/* A stand-in library whose driver-named functions carry a symbol version (version script
 * versioned_driver.map), for the dlvsym route: a versioned lookup of a hooked name must
 * give the wrapper when the library has that version, and nothing when it does not. */
int cuMemGetInfo_v2(void) { return 999; }
int cuDeviceGetName(void) { return 998; }

// epoll for the load generator (RallyWireLoad): Swift's Glibc module does
// not export <sys/epoll.h>.
#ifndef C_LOAD_EPOLL_H
#define C_LOAD_EPOLL_H
#ifdef __linux__
#include <sys/epoll.h>
#endif
#endif

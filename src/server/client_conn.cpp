// server/client_conn: finding a connection's socket by its 4-tuple (scan of /proc/self/fd) and
// a non-blocking hang-up check (poll for POLLRDHUP/POLLHUP/POLLERR, then a 1-byte MSG_PEEK).
#include "server/client_conn.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace tetra {

namespace {

// Numeric host and port of a socket address, as httplib formats them.
bool numeric_address(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    host = h;
    port = std::atoi(p);
    return true;
}

bool is_connection(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    std::string host;
    int port = -1;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !numeric_address(a, len, host, port)) return false;
    if (port != remote_port || host != remote_addr) return false;
    len = sizeof(a);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !numeric_address(a, len, host, port)) return false;
    return port == local_port && host == local_addr;
}

}  // namespace

client_connection client_connection::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                          int remote_port) {
    client_connection c;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return c;
    int self = dirfd(d);
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == self) continue;
        if (is_connection(int(fd), local_addr, local_port, remote_addr, remote_port)) {
            c.fd_ = int(fd);
            break;
        }
    }
    closedir(d);
    return c;
}

bool client_connection::gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, short(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    if (!(p.revents & POLLIN)) return false;
    char c;
    ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace tetra

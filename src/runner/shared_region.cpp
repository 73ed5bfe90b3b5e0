#include "runner/shared_region.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kfab {

using Clock = std::chrono::steady_clock;

SharedRegion::SharedRegion(SharedRegion&& o) noexcept { *this = std::move(o); }

SharedRegion& SharedRegion::operator=(SharedRegion&& o) noexcept {
  if (this != &o) {
    this->~SharedRegion();
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    dev_ = o.dev_;
    ino_ = o.ino_;
  }
  return *this;
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
}

Expected<SharedRegion> SharedRegion::create(size_t bytes, const char* name) {
  SharedRegion r;
  r.fd_ = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r.fd_ < 0) return make_error(std::string("memfd_create: ") + std::strerror(errno));
  r.size_ = bytes == 0 ? 64 : bytes;
  if (::ftruncate(r.fd_, static_cast<off_t>(r.size_)) != 0)
    return make_error("cannot size shared memory of " + std::to_string(r.size_) + " bytes: " + std::strerror(errno));
  void* p = ::mmap(nullptr, r.size_, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd_, 0);
  if (p == MAP_FAILED) return make_error("cannot map shared memory of " + std::to_string(r.size_) + " bytes: " + std::strerror(errno));
  r.data_ = p;
  struct stat st {};
  if (::fstat(r.fd_, &st) == 0) {
    r.dev_ = st.st_dev;
    r.ino_ = st.st_ino;
  }
  return r;
}

Expected<SharedRegion> SharedRegion::map_received(int fd, size_t min_bytes) {
  SharedRegion r;
  r.fd_ = fd;
  if (::fcntl(fd, F_GET_SEALS) < 0) return make_error("the runner passed a descriptor that is not shared memory (a memfd)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return make_error("the runner passed a descriptor kfab cannot inspect");
  if (static_cast<size_t>(st.st_size) < min_bytes)
    return make_error("the runner's shared memory holds " + std::to_string(st.st_size) + " bytes, fewer than the " +
                      std::to_string(min_bytes) + " its outputs need");
  r.size_ = static_cast<size_t>(st.st_size);
  r.dev_ = st.st_dev;
  r.ino_ = st.st_ino;
  void* p = ::mmap(nullptr, r.size_, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return make_error(std::string("cannot map the runner's shared memory: ") + std::strerror(errno));
  r.data_ = p;
  return r;
}

bool SharedRegion::still_holds(size_t bytes) const {
  if (fd_ < 0) return data_ != nullptr && bytes <= size_;
  struct stat st {};
  return ::fstat(fd_, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes && bytes <= size_;
}

bool SharedRegion::same_file(int fd) const {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
}

void SharedRegion::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

/// One byte and room for one descriptor: a message of the descriptor channel, either way.
struct FdMessage {
  char byte = 'F';
  struct iovec iov {};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg {};

  FdMessage() {
    iov = {&byte, 1};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

}  // namespace

bool send_fds(int sock, const std::vector<int>& fds) {
  for (int fd : fds) {
    FdMessage m;
    struct cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ssize_t n;
    do n = ::sendmsg(sock, &m.msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != 1) return false;
  }
  return true;
}

std::optional<int> receive_fd(int sock, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    struct pollfd p = {sock, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    if (r < 0) return std::nullopt;
    FdMessage m;
    ssize_t n;
    do n = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n != 1) return std::nullopt;
    struct cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
      continue;  // a byte without a descriptor: not the runner's
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
  }
}

std::vector<size_t> output_bytes(const Task& task, const ShapeBinding& shape) {
  std::vector<size_t> b;
  for (const auto& o : task.outputs) {
    size_t n = dtype_size(o.dtype);
    for (int64_t d : task.dims(o, shape)) n *= static_cast<size_t>(d);
    b.push_back(n);
  }
  return b;
}

std::vector<size_t> region_layout(const std::vector<size_t>& bytes, size_t* total) {
  std::vector<size_t> at;
  size_t off = 0;
  for (size_t b : bytes) {
    at.push_back(off);
    off += (b + 63) / 64 * 64;
  }
  *total = off;
  return at;
}

}  // namespace kfab

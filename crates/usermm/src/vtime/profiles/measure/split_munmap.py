import sys,collections
cats=[('free_pcppages_bulk','bulk'),('__free_one_page','bulk'),('free_one_page','bulk'),
('free_unref_folios','free_unref'),('free_frozen_page_commit','free_unref'),('free_unref_page','free_unref'),
('__mem_cgroup_uncharge_folios','memcg_uncharge'),
('folios_put_refs','release'),('free_pages_and_swap_cache','release'),
('free_pgtables','pt_free'),('flush_tlb_mm_range','tlb'),
('folio_remove_rmap_ptes','zap_rmap'),('__tlb_remove_folio_pages','gather'),('__tlb_remove_folio_pages_size','gather'),
('unmap_page_range','zap'),('zap_pte_range','zap'),('zap_present_ptes','zap')]
tot=collections.Counter(); leaf=collections.Counter()
stack=[]
def flush():
    if not stack: return
    syms=[s for s in stack]
    if not any('__x64_sys_munmap' in s for s in syms): return
    tot['munmap']+=1
    for s in syms:  # leaf first
        for k,c in cats:
            if s==k:
                tot[c]+=1; leaf[(c,syms[0])]+=1; return
    tot['other']+=1; leaf[('other',syms[0])]+=1
for line in open(sys.argv[1]):
    line=line.strip()
    if not line: flush(); stack=[]; continue
    parts=line.split(None,1)
    stack.append(parts[1].split('+')[0] if len(parts)>1 else '?')
flush()
m=tot['munmap']
for k,v in tot.most_common(): print(f"{k:16s} {v:6d} {100*v/m:5.1f}%")
print()
for (c,s),v in leaf.most_common(25): print(f"{c:14s} {s:40s} {100*v/m:5.1f}%")
